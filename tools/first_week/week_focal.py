"""A custom loss (the focal loss of Lin et al., 2017) checked with torch.autograd.gradcheck,
then used to train an MLP on the digits (examples/week_focal.rs)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def focal_loss(logits, labels, gamma):
    logp = logits.log_softmax(1).gather(1, labels[:, None])
    weight = (1 - logp.exp()) ** gamma
    return -(weight * logp).mean()


torch.manual_seed(0)
logits = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
labels = torch.tensor([0, 3, 1, 4])
print(torch.autograd.gradcheck(lambda z: focal_loss(z, labels, 2.0), (logits,)))
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16, dtype=torch.float32)
x_train, x_test, y_train, y_test = train_test_split(x, torch.tensor(y), test_size=0.2, random_state=0)
loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for epoch in range(1, 6):
    for xb, yb in loader:
        loss = focal_loss(model(xb), yb, 2.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"epoch {epoch}: test accuracy {acc:.4f}")
