"""Where the compiled pipeline used to live; kept so that older imports keep working.

The pieces are now: `mediapipe.plan` (the compiled, immutable `Plan`), `mediapipe.sample_stage`,
`mediapipe.batch_builder`, `mediapipe.batch_stage`, `mediapipe.error_policy`,
`mediapipe.host_batch` and `mediapipe.stats`. Import from those.
"""

from __future__ import annotations

from mediapipe.collate import stack_params
from mediapipe.host_batch import Deferred, HostBatch
from mediapipe.plan import ON_ERROR, PlacedOp, Plan
from mediapipe.stats import StageStats

__all__ = ["ON_ERROR", "Deferred", "HostBatch", "PlacedOp", "Plan", "StageStats", "stack_params"]
