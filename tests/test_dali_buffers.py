"""The DALI backend's recycled output buffers: reused only once nothing reads them."""

from __future__ import annotations

import torch

from mediapipe.loaders.dali.buffers import RecycledBuffers


def test_a_buffer_is_reused_only_when_every_tensor_on_it_is_gone():
    buffers = RecycledBuffers(keep=4)
    first = buffers.empty((4, 3, 8, 8), torch.float32).fill_(1.0)
    pointer = first.data_ptr()
    view = first[1:3]  # the training loop keeps a view, drops the batch
    del first
    second = buffers.empty((4, 3, 8, 8), torch.float32).fill_(2.0)
    assert second.data_ptr() != pointer and bool((view == 1.0).all())  # never written under a live view
    array = view.numpy()  # numpy's view of it counts too
    del view
    third = buffers.empty((4, 3, 8, 8), torch.float32).fill_(3.0)
    assert third.data_ptr() != pointer and bool((array == 1.0).all())
    del array, second
    again = buffers.empty((4, 3, 8, 8), torch.float32)
    assert again.data_ptr() == pointer  # nothing reads it any more: recycled, no fresh pages


def test_sizes_dtypes_and_a_full_pool():
    buffers = RecycledBuffers(keep=2)
    held = [buffers.empty((5, 7), torch.uint8) for _ in range(4)]  # more in use than it keeps: fresh ones
    assert len({t.data_ptr() for t in held}) == 4 and all(t.shape == (5, 7) and t.dtype == torch.uint8 for t in held)
    pointer = held[0].data_ptr()
    del held
    smaller = buffers.empty((4, 7), torch.uint8)  # fits in a free buffer within the slack
    assert smaller.data_ptr() == pointer and smaller.shape == (4, 7)
    assert buffers.empty((2, 0, 3), torch.float32).shape == (2, 0, 3)
    assert buffers.empty((3,), torch.float64).dtype == torch.float64
