"""What only train.py and average_checkpoints.py use: the trainer, the training set, flags, checkpoints, precision."""
