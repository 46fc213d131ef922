__import__('os').system('touch /tmp/ferry_pwned')
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        __import__('os').system('touch /tmp/ferry_pwned')
        return self.fc(x)
