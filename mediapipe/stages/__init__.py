"""Running one batch, task to device: the sample stage in the workers, collate, the device
stage, the batch stage, the error policy, the stats and shared memory."""
