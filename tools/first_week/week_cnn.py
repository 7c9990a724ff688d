"""A CNN on the digits with AdamW, a step schedule and a checkpoint every epoch:
`python week_cnn.py 2` stops after epoch 2, a second run resumes (examples/week_cnn.rs)."""
import os, sys, tempfile
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

stop = int(sys.argv[1]) if len(sys.argv) > 1 else 4
torch.manual_seed(0)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16, dtype=torch.float32).reshape(-1, 1, 8, 8)
x_train, x_test, y_train, y_test = train_test_split(x, torch.tensor(y), test_size=0.2, random_state=0)
loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(16 * 4 * 4, 10),
)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
path = os.path.join(tempfile.gettempdir(), "week_cnn.pt")
epoch = 0
if os.path.exists(path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    epoch = state["epoch"]
    torch.set_rng_state(state["rng"])
while epoch < min(stop, 4):
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sched.step()
    epoch += 1
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    torch.save({**state, "epoch": epoch, "rng": torch.get_rng_state()}, path)
    model.eval()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    model.train()
    print(f"epoch {epoch}: test accuracy {acc:.4f}")
