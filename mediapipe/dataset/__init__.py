"""The converted dataset: its format (tar shards, indices, manifest), `convert` with its local,
Ray and remote engines, transcoding, and `inspect` / `verify`."""
