"""`mediapipe bench`: training-input throughput, with peers measured in the same run."""
