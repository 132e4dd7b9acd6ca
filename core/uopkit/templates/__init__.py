"""Templates for `uopkit new-backend NAME DIR` (files ending in .tmpl; ``{{NAME}}``-style placeholders)."""
