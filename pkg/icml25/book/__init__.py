"""The book builder (`icml25 build`), its scorecard and table of contents, and the browser check."""
