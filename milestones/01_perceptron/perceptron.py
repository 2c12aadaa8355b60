# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Milestone 1 — The perceptron (Rosenblatt, 1958)
#
# Frank Rosenblatt's perceptron is a single threshold unit,
# $\hat y = \operatorname{sign}(w \cdot x + b)$, with a learning rule that
# needs no calculus: on every mistake, move the weights towards the example,
#
# $$w \leftarrow w + \eta\, y\, x \qquad (y \in \{-1, +1\}),$$
#
# which is Rosenblatt's $w \mathrel{+}= \eta (y - \hat y) x$ up to a factor 2.
# Nothing changes on correct answers.
#
# **The published figure.** Rosenblatt, *The perceptron: a probabilistic model
# for information storage and organization in the brain*, Psychological
# Review 65(6), 386–408 (1958), claimed the rule learns any task a perceptron
# can represent; Novikoff, *On convergence proofs on perceptrons* (1962),
# proved it: if some unit vector $u$ separates the data with margin
# $\gamma = \min_i y_i\, u \cdot x_i > 0$ and every $\lVert x_i \rVert \le R$,
# the rule makes **at most $(R/\gamma)^2$ mistakes**, then classifies every
# training example correctly (0 errors).
#
# We reproduce both: zero training errors after a few epochs, and a mistake
# count under Novikoff's bound, on the linearly separable `tinyflo.datasets.blobs`.
#
# **Needs** module 01 (tensor). No autograd: the rule is its own update.

# %%
import numpy as np

import tinyflo
from tinyflo import milestones

run = milestones.start("perceptron")
plt = run.pyplot()  # matplotlib.pyplot, or None without matplotlib: then the plots are skipped
if plt is not None:
    from matplotlib.ticker import MaxNLocator

# %% [markdown]
# ## The data: two clusters a straight line separates
#
# `blobs` with three classes puts three round clusters on a circle; we keep
# the first two, so the separating line does not pass through the origin and
# the bias matters. A bias is a weight on a constant input, so we append a 1 to every point and
# learn one vector $w = (w_1, w_2, b)$. Labels become $\pm 1$.

# %%
points = 200 if run.quick else 1000
x_np, y_np = tinyflo.datasets.blobs(points_per_class=points, classes=3, seed=0, as_arrays=True)
x_np, y_np = x_np[y_np < 2], y_np[y_np < 2]
X = tinyflo.tensor(np.hstack([x_np, np.ones((len(x_np), 1), np.float32)]), device=run.device)
Y = tinyflo.tensor(2.0 * y_np - 1.0, dtype=tinyflo.float32, device=run.device)
print(f"{len(x_np)} points, {X.shape[1]} inputs (bias included), labels ±1")

# %% [markdown]
# ## The perceptron learning rule
#
# One epoch visits the examples in a fresh random order; a mistake is
# $y\,(w\cdot x) \le 0$ (on the line counts as wrong, so the start $w = 0$
# is a mistake everywhere).

# %%
def train_perceptron(X, Y, lr=1.0, max_epochs=100, seed=0):
    """Rosenblatt's rule, one example at a time; returns w and the mistakes made in each epoch."""
    w = tinyflo.zeros(X.shape[1], device=X.device)
    order = np.random.default_rng(seed)
    mistakes_per_epoch = []
    for _ in range(max_epochs):
        mistakes = 0
        for i in order.permutation(X.shape[0]):
            x, y = X[int(i)], Y[int(i)]
            if (y * (w * x).sum()).item() <= 0:
                w = w + lr * y * x
                mistakes += 1
        mistakes_per_epoch.append(mistakes)
        if mistakes == 0:  # a whole epoch without a mistake: every example is classified correctly
            break
    return w, mistakes_per_epoch


w, mistakes_per_epoch = train_perceptron(X, Y)
errors = int(((X @ w) * Y <= 0).sum().item())
print(f"mistakes per epoch: {mistakes_per_epoch}")
print(f"training errors after {len(mistakes_per_epoch)} epochs: {errors}")

# %% [markdown]
# ## Novikoff's bound
#
# $R$ is the largest input norm. For $\gamma$ any unit vector that separates
# the data gives a valid bound; we take the better of two: the perpendicular
# bisector of the two cluster means (the line the data were built around) and
# the perceptron's own final $w$, each normalised as a 3-vector.

# %%
R = float(tinyflo.tensor(np.linalg.norm(X.numpy(), axis=1)).max().item())


def margin(u):
    """min_i y_i u·x_i / |u|: the margin of the separator u (negative if it misclassifies)."""
    return float((((X @ u) * Y).min() / (u * u).sum() ** 0.5).item())


mean0, mean1 = x_np[y_np == 0].mean(axis=0), x_np[y_np == 1].mean(axis=0)
normal = mean1 - mean0  # points towards class 1 (label +1)
bisector = tinyflo.tensor([*normal, -normal @ (mean0 + mean1) / 2], dtype=tinyflo.float32, device=run.device)
gamma = max(margin(bisector), margin(w))
bound = (R / gamma) ** 2
total = sum(mistakes_per_epoch)
print(f"R = {R:.3f}, γ = {gamma:.3f}: at most (R/γ)² = {bound:.1f} mistakes; the rule made {total}")
run.numbers.update(points=len(x_np), epochs=len(mistakes_per_epoch), mistakes=total, R=R, gamma=gamma,
                   novikoff_bound=bound, mistakes_per_epoch=mistakes_per_epoch,
                   weights=[float(v) for v in w.numpy()])

# %% [markdown]
# ## The decision boundary

# %%
w1, w2, b = (float(v) for v in w.numpy())
if plt is not None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, colour in ((0, "tab:blue"), (1, "tab:orange")):
        left.scatter(*x_np[y_np == label].T, s=8, c=colour, label=f"class {label} (label {2 * label - 1:+d})")
    xs = np.linspace(x_np[:, 0].min(), x_np[:, 0].max(), 2)
    left.plot(xs, -(w1 * xs + b) / w2, "k-", label="perceptron boundary")
    left.set(xlabel="$x_1$", ylabel="$x_2$", title=f"0 training errors after {len(mistakes_per_epoch)} epochs",
             ylim=(x_np[:, 1].min() - 0.5, x_np[:, 1].max() + 0.5))
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)  # below the axes: no point hidden
    left.set_aspect("equal")
    bars = right.bar(range(1, len(mistakes_per_epoch) + 1), mistakes_per_epoch)
    right.bar_label(bars)  # each epoch's count, a 0 too
    right.margins(y=0.1)  # room above the tallest bar for its count
    right.set(xlabel="epoch", ylabel="mistakes (updates)", xticks=range(1, len(mistakes_per_epoch) + 1),
              title=f"{total} mistakes in all; Novikoff's bound (R/γ)² = {bound:.0f}")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count: whole numbers only
    run.savefig(fig, "perceptron.png")

# %% [markdown]
# ## Reproduced, beside the published

# %%
run.figure("training errors at convergence", errors, 0, "Rosenblatt 1958; Novikoff 1962", errors == 0)
run.figure("mistakes ≤ (R/γ)²", f"{total} ≤ {bound:.0f}", "mistakes ≤ (R/γ)²", "Novikoff 1962",
           errors == 0 and total <= bound)
result = run.finish()
