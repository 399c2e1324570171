"""Decoders: bytes to tensors, one interface, many backends, chosen per device.

``mp.decoders.image()``, ``mp.decoders.mask()``, ``mp.decoders.video()``, ``mp.decoders.audio()``
return specs (each kind's options a frozen dataclass: `ImageOptions`, `VideoOptions`,
`AudioOptions`); the registry turns a spec into a live backend in each worker. Importing this
package registers the built-in backends.
"""

from mediapipe.decoders import image_nvimgcodec, image_pillow, image_turbo  # noqa: F401  (register backends)
from mediapipe.decoders.audio import AudioOptions
from mediapipe.decoders.audio_pyav import AudioDecoder, PyAVAudioDecoder, audio
from mediapipe.decoders.audio_soundfile import SoundfileAudioDecoder  # noqa: F401  (registers soundfile)
from mediapipe.decoders.base import Decoded, DecodeHint, Decoder, Limits
from mediapipe.decoders.image import ImageDecoder, ImageOptions, image, mask
from mediapipe.decoders.options import DecoderOptions
from mediapipe.decoders.registry import backends, create, register
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.decoders.video import VideoDecoder, VideoOptions, video  # registers pyav and nvdec

__all__ = [
    "AudioDecoder", "AudioOptions", "Decoded", "DecodeHint", "Decoder", "DecoderOptions", "DecoderSpec",
    "ImageDecoder", "ImageOptions", "Limits", "PyAVAudioDecoder", "VideoDecoder", "VideoOptions", "audio",
    "backends", "create", "image", "mask", "register", "video",
]
