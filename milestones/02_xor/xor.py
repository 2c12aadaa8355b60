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
# # Milestone 2 — The XOR crisis (Minsky & Papert, 1969)
#
# XOR is 1 when exactly one input is 1:
#
# | $x_1$ | $x_2$ | XOR |
# |---|---|---|
# | 0 | 0 | 0 |
# | 0 | 1 | 1 |
# | 1 | 0 | 1 |
# | 1 | 1 | 0 |
#
# **The published figure.** Minsky & Papert, *Perceptrons: An Introduction to
# Computational Geometry* (MIT Press, 1969), proved that a single layer of
# threshold units cannot compute parity, XOR being its smallest case: no line
# puts (0,1) and (1,0) on one side and (0,0) and (1,1) on the other, so a
# single linear threshold unit gets **at most 3 of the 4 points right (75%)**.
# The book is often blamed for the first "AI winter".
#
# The proof fits in one line. Predict 1 when $w_1x_1 + w_2x_2 + b > 0$. XOR
# needs $b \le 0$, $w_1 + b > 0$, $w_2 + b > 0$ and $w_1 + w_2 + b \le 0$;
# adding the middle two gives $w_1 + w_2 + b > -b \ge 0$, contradicting the last.
#
# We show it three ways: train a single linear layer by gradient descent
# (logistic regression), run Rosenblatt's rule (it never stops making
# mistakes), and search a dense grid of weights exhaustively.
#
# **Needs** modules 01 tensor, 02 autograd, 03 layers, 04 losses, 06 optimizers.

# %%
import numpy as np

import tinyflo
from tinyflo import milestones, nn

run = milestones.start("xor")
plt = run.pyplot()  # matplotlib.pyplot, or None without matplotlib: then the plots are skipped
tinyflo.manual_seed(0)

X = tinyflo.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], device=run.device)
Y = tinyflo.tensor([0.0, 1.0, 1.0, 0.0], device=run.device)

# %% [markdown]
# ## 1. A single linear layer, trained by gradient descent
#
# One `Linear(2, 1)` and the logistic loss; predict 1 when the logit is
# positive. Gradient descent finds the best it can — and the best is not enough:
# the best logistic fit to XOR is $w = 0$, $b = 0$ (the loss is convex and its
# gradient vanishes there), every output 1/2 and the loss $\log 2$. The weights
# shrink towards zero, and the signs of the tiny logits that remain decide
# which points count as right.

# %%
steps = 500 if run.quick else 5000
layer = nn.Linear(2, 1).to(run.device)
optimizer = tinyflo.optim.SGD(layer.parameters(), lr=0.5, momentum=0.9)
loss_fn = nn.BCEWithLogitsLoss()
accuracies = []
for _ in range(steps):
    logits = layer(X).reshape(4)
    loss = loss_fn(logits, Y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    accuracies.append(float(((logits.detach() > 0) == (Y > 0.5)).float().mean().item()))
single_layer = max(accuracies)
print(f"single linear layer, {steps} steps: final loss {loss.item():.4f} (log 2 = 0.6931), "
      f"best accuracy seen {single_layer:.0%}")

# %% [markdown]
# ## 2. Rosenblatt's rule never converges
#
# On separable data the rule stops making mistakes (milestone 1); on XOR
# every epoch has a mistake, forever.

# %%
epochs = 100 if run.quick else 1000
Xb = tinyflo.cat([X, tinyflo.ones((4, 1), device=run.device)], axis=1)
S = 2 * Y - 1
w = tinyflo.zeros(3, device=run.device)
mistakes_per_epoch = []
for _ in range(epochs):
    mistakes = 0
    for i in range(4):
        if (S[i] * (w * Xb[i]).sum()).item() <= 0:
            w = w + S[i] * Xb[i]
            mistakes += 1
    mistakes_per_epoch.append(mistakes)
print(f"perceptron rule: fewest mistakes in an epoch over {epochs} epochs: {min(mistakes_per_epoch)}")

# %% [markdown]
# ## 3. Every linear threshold on a grid
#
# Evaluate $\mathbb 1[w_1x_1 + w_2x_2 + b > 0]$ on all four points for every
# $(w_1, w_2, b)$ on a dense grid in $[-1, 1]^3$ at once (broadcasting), and
# take the best accuracy.

# %%
n = 61 if run.quick else 201
grid = tinyflo.tensor(np.linspace(-1.0, 1.0, n, dtype=np.float32), device=run.device)
w1, w2, b = grid.reshape(n, 1, 1), grid.reshape(1, n, 1), grid.reshape(1, 1, n)
correct = tinyflo.zeros((n, n, n), device=run.device)
for (x1, x2), target in zip(X.numpy().tolist(), Y.numpy().tolist()):
    correct = correct + ((w1 * x1 + w2 * x2 + b > 0).float() == target).float()
accuracy = correct / 4
grid_best = float(accuracy.max().item())
share_at_best = float((accuracy == grid_best).float().mean().item())
print(f"{n}³ = {n ** 3:,} linear thresholds: best accuracy {grid_best:.0%} "
      f"({share_at_best:.1%} of them reach it); none gets all four")
run.numbers.update(single_layer_accuracy=single_layer, final_loss=float(loss.item()),
                   perceptron_min_mistakes=min(mistakes_per_epoch), grid_size=n ** 3,
                   grid_best_accuracy=grid_best, grid_share_at_best=share_at_best)

# %% [markdown]
# ## The picture: no line works

# %%
levels = np.arange(5) / 4
counts = [float(((accuracy == level).float().sum()).item()) for level in levels]
run.numbers["grid_counts"] = dict(zip(["0%", "25%", "50%", "75%", "100%"], counts))
if plt is not None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    points, labels = X.numpy(), Y.numpy()
    # One of the best lines on the grid: the side it calls 1 shaded, the point it gets wrong ringed.
    values = np.linspace(-1.0, 1.0, n)
    best = [(i, j, k) for i, j, k in np.argwhere(accuracy.numpy() == grid_best) if abs(values[j]) >= 0.5]
    bw1, bw2, bb = (values[index] for index in best[len(best) // 2])
    xs = np.linspace(-0.5, 1.5, 201)
    gx, gy = np.meshgrid(xs, xs)
    left.contourf(gx, gy, bw1 * gx + bw2 * gy + bb > 0, levels=1, colors=["white", "tab:orange"], alpha=0.15)
    left.fill_between([], [], color="tab:orange", alpha=0.15, label="where that line says 1")
    left.plot(xs, -(bw1 * xs + bb) / bw2, "k-", label=f"a best line: {grid_best:.0%} right")
    left.scatter(*points[labels == 0].T, s=200, marker="o", label="XOR = 0")
    left.scatter(*points[labels == 1].T, s=200, marker="x", label="XOR = 1")
    wrong = (bw1 * points[:, 0] + bw2 * points[:, 1] + bb > 0) != (labels > 0.5)
    left.scatter(*points[wrong].T, s=700, facecolors="none", edgecolors="red", label="wrong")
    a, c = layer.weight.numpy()[0]
    left.set(xlim=(-0.5, 1.5), ylim=(-0.5, 1.5), xlabel="$x_1$", ylabel="$x_2$",
             title=f"the best lines get {grid_best:.0%}: one point is always wrong\n"
                   f"(a trained layer gives up: |w| = {np.hypot(a, c):.0e})")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below the axes: no point hidden
    # A log axis has no zero: an empty level gets no bar, only its count "0" on the axis.
    places = np.arange(len(levels))
    right.bar(places, [count if count else np.nan for count in counts], log=True)
    right.set_ylim(0.7, 8 * max(counts))  # room above the tallest bar for its count
    right.set_xlim(-0.6, len(levels) - 0.4)  # every level in view, empty ones too
    for i, count in enumerate(counts):
        right.annotate(f"{count:,.0f}", (i, count if count else 0.7), ha="center", va="bottom")
    right.set(xlabel="accuracy on the four XOR points", ylabel="linear thresholds (log)", xticks=places,
              xticklabels=[f"{level:.0%}" for level in levels],
              title=f"all {n ** 3:,} thresholds on the grid:\nnone reaches 100%")
    run.savefig(fig, "xor.png")

# %% [markdown]
# ## Reproduced, beside the published

# %%
run.figure("single linear layer (trained), best accuracy", f"{single_layer:.0%}", "≤ 75%",
           "Minsky & Papert 1969", single_layer <= 0.75)
run.figure("perceptron rule: an epoch without mistakes", "never" if min(mistakes_per_epoch) else "yes",
           "never", "Minsky & Papert 1969", min(mistakes_per_epoch) > 0)
run.figure(f"best of {n ** 3:,} linear thresholds", f"{grid_best:.0%}", "75%", "Minsky & Papert 1969",
           grid_best == 0.75)
result = run.finish()
