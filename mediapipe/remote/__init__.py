"""Datasets in object storage (``https://``, ``s3://``, ``gs://``) through fsspec, the ``remote`` extra,
imported on first use: `urls` says which URLs name a store and confines a dataset's file names to its
folder; `retry` holds the one `Retry` rule every request keeps (``attempts`` tries with backoff, each
silent at most ``timeout`` seconds and ended within ``2 * timeout + bytes / min_rate``, the protocol
packages' own retries off); `versions` the `ObjectVersion` every answer states (size, ETag /
Last-Modified / GCS generation), by which a read refuses an object rewritten since the dataset was opened;
`httpfs` and `buckets` the exact ranged and bounded whole reads of HTTP(S) and of S3 / GCS; `stores` the
`RemoteStore`, one dataset folder of a store, whose errors are `SourceError`s naming the URL; and `cache`
the `ShardCache` of whole, checked shards on local disk, least recently used evicted first."""
