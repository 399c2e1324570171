"""``mediapipe selfcheck``: the GPU path checked on one machine, and the checks it runs."""
