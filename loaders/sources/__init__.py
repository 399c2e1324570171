"""Sources: one module per dataset format (a folder, a manifest, converted shards, Parquet,
Hugging Face, TFRecord, RecordIO, COCO, YOLO, speech manifests), and what they share."""
