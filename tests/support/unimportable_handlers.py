"""A handler module whose import fails (its model's weights are missing): a catalog that
names it must stop the app's start with this error."""

raise RuntimeError("weights not found: models/classifier.bin")
