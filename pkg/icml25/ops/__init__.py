"""The compiled-kernel front: each kernel has a pure-PyTorch reference here and a C++ build in kernels/."""


def prepare() -> None:
    """Build the compiled kernels once, before notebooks fan out (nothing to build yet)."""
