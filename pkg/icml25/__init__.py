"""ICML 2025 in miniature: the book's toolbox.

`icml25.core` is the shared workbench (tiny LMs, generation, training, zoo, claims),
`icml25.ops` the compiled-kernel front, `icml25.<slug>` one module per chapter, and
`icml25.book` the builder behind the `icml25` command.
"""

__version__ = "0.1.0"
