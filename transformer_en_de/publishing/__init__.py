"""Pushing a folder to the Hugging Face Hub (a model repo or the Space) and the model card it carries."""
