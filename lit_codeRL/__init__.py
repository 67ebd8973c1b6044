"""lit-coderl: reinforcement learning for code-writing policies on PyTorch Lightning."""

__version__ = "0.1.0"
