"""The DALI backend: the loader, the lowering of ops to DALI operators, its output buffers."""
