"""A GRU sequence classifier reading each 8x8 digit as 8 rows, classifying from the
last hidden state, trained with Adam and gradient clipping (examples/week_gru.rs)."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 32, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h.squeeze(0))


torch.manual_seed(0)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16, dtype=torch.float32).reshape(-1, 8, 8)
x_train, x_test, y_train, y_test = train_test_split(x, torch.tensor(y), test_size=0.2, random_state=0)
loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(1, 6):
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"epoch {epoch}: test accuracy {acc:.4f}")
