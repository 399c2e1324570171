"""rocAL's (rpp's) and DALI's image effects as pure batched kernels, per-sample parameters as (B,) tensors.

Images are (B, C, H, W) and clips (B, T, C, H, W), uint8 or float in [0, 1]; constants that rpp
writes in grey levels (rain's 200, snow's flake) are divided by 255 for float input. Each
kernel's formula is its library's, named in the op's docstring (`mediapipe.augment.effects`).

Per-pixel randomness (noise, drops, flakes) is `counter_uniform`: a hash of a per-sample key and
the element's index, computed on the batch's device with integer arithmetic, so a sample's noise
is the same on any device, in any batch and whatever the workers. Maps that depend only on a
pixel's position (a vignette's gain, a fog's texture) are computed in float64 and cast once; the
per-pixel blends run in float32, as rpp does. The lens warps are in `mediapipe.augment.functional.lens`.
"""

from __future__ import annotations

import math

import torch

_M32 = 0xFFFFFFFF

# -- counter-based randomness ---------------------------------------------------------------------


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors (values kept below 2**32, so products stay below 2**63)."""
    x = x & _M32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    x = ((x >> 16) ^ x) * 0x2C1B3C6D & _M32
    return (x >> 16) ^ x


def _seeds(keys: torch.Tensor, stream: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32-bit seeds (B, 1) per sample key and stream: different streams of one key are unrelated."""
    k = keys.to(device, torch.int64).reshape(-1, 1)
    s1 = _hash32((k & _M32) ^ _hash32((k >> 32) + 0x9E3779B9 * (stream + 1)))
    return s1, _hash32(s1 + 0x68E31DA4)


def counter_uniform(keys: torch.Tensor, shape: tuple[int, ...], device: torch.device | str,
                    stream: int = 0) -> torch.Tensor:
    """(B, *shape) float64 in (0, 1): element i of sample b is a pure function of (keys[b], stream, i),
    32 bits of it, as (h + 0.5) / 2**32."""
    device = torch.device(device)
    s1, s2 = _seeds(keys, stream, device)
    idx = torch.arange(math.prod(shape), device=device, dtype=torch.int64)[None, :]
    h = _hash32(_hash32(idx + s1) ^ s2)
    return ((h.to(torch.float64) + 0.5) * (1.0 / 4294967296.0)).reshape(-1, *shape)


def counter_integers(keys: torch.Tensor, count: int, high: torch.Tensor, device: torch.device | str,
                     stream: int) -> torch.Tensor:
    """(B, count) int64 uniform in [0, high[b]) (``high`` (B,) >= 1), from `counter_uniform`."""
    u = counter_uniform(keys, (count,), device, stream)
    high = high.to(u.device, torch.float64).reshape(-1, 1)
    return torch.minimum(torch.floor(u * high), high - 1).to(torch.int64)


# -- shared helpers -------------------------------------------------------------------------------


def _per_sample(value: torch.Tensor, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A (B,) parameter as (B, 1, ..., 1) against x (B, ...)."""
    return torch.as_tensor(value).to(x.device, dtype).reshape(-1, *(1,) * (x.ndim - 1))


def _full_scale(x: torch.Tensor) -> float:
    return 1.0 if x.is_floating_point() else 255.0


def as_float32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float32 else x.to(torch.float32)


def finish(y: torch.Tensor, like: torch.Tensor, rounding: str = "even") -> torch.Tensor:
    """Back to ``like``'s dtype, saturated to its range: uint8 rounded (to even, as rpp's nearbyintf;
    "trunc"; "half_up", as DALI's std::round of a non-negative value), float clamped to [0, 1]."""
    if like.is_floating_point():
        return y.clamp_(0.0, 1.0).to(like.dtype)
    if rounding == "even":
        y = torch.round(y)
    elif rounding == "half_up":
        y = torch.floor(y + 0.5)
    else:
        y = torch.trunc(y)
    return y.clamp_(0, 255).to(like.dtype)


def flat_canvas(x: torch.Tensor) -> tuple[int, int, torch.Tensor]:
    """(H, W, x as (B, M, H*W)): every channel and frame of a sample in one middle dim."""
    height, width = x.shape[-2:]
    return height, width, x.reshape(x.shape[0], -1, height * width)


def _per_pixel(layer: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A (B, H, W) layer as (B, 1, ..., 1, H, W) against x (B, ..., H, W)."""
    return layer.reshape(layer.shape[0], *(1,) * (x.ndim - 3), *layer.shape[-2:])


def grey(x: torch.Tensor) -> torch.Tensor:
    """rpp's luma (..., 1, H, W) in float32: 0.299 R + 0.587 G + 0.114 B (a one-channel image is its own)."""
    xf = as_float32(x)
    if x.shape[-3] == 1:
        return xf
    if x.shape[-3] != 3:
        raise ValueError(f"images of {x.shape[-3]} channels (shape {tuple(x.shape)}): the colour effects take 1 "
                         "(grey) or 3 (RGB) channels")
    r, g, b = xf.unbind(dim=-3)
    return (r * 0.299 + g * 0.587 + b * 0.114).unsqueeze(-3)


# -- colour ---------------------------------------------------------------------------------------


def gamma_correction(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """rpp's gamma_correction: uint8 through a per-sample table, trunc(255 (v / 255) ** gamma[b]),
    the power taken in float64; float input as clamp(x, 0, 1) ** gamma[b]."""
    if x.is_floating_point():
        return x.clamp(0.0, 1.0).pow(_per_sample(gamma, x, x.dtype))
    levels = torch.arange(256, device=x.device, dtype=torch.float64) / 255.0
    table = torch.trunc(levels[None, :].pow(gamma.to(x.device, torch.float64).reshape(-1, 1)) * 255.0)
    table = table.clamp_(0, 255).to(torch.uint8)  # (B, 256)
    flat = x.reshape(x.shape[0], -1).to(torch.int64)
    return torch.gather(table, 1, flat).reshape(x.shape)


def color_temperature(x: torch.Tensor, adjustment: torch.Tensor) -> torch.Tensor:
    """rpp's color_temperature: red plus ``adjustment[b]`` grey levels, blue minus it, green kept,
    saturated (float input: adjustment / 255, clamped to [0, 1])."""
    if x.shape[-3] != 3:
        raise ValueError(f"ColorTemperature: RGB images (3 channels), got {x.shape[-3]} (shape {tuple(x.shape)})")
    a = _per_sample(adjustment, x)[..., 0, :, :] / (255.0 if x.is_floating_point() else 1.0)
    r, g, b = as_float32(x).unbind(dim=-3)
    out = torch.stack((r + a, g, b - a), dim=-3)
    return finish(out, x)


def vignette_gain(intensity: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
    """rpp's vignette gain (B, H, W): exp(m (i - H//2)^2 + m (j - W//2)^2), m = -intensity / (4 r^2),
    r = max(H//2, W//2); 1 at the centre pixel."""
    half_h, half_w = height >> 1, width >> 1
    radius = max(half_h, half_w, 1)
    m = (-0.25 * intensity.to(device, torch.float64) / float(radius * radius)).reshape(-1, 1, 1)
    di = (torch.arange(height, device=device, dtype=torch.float64) - half_h) ** 2
    dj = (torch.arange(width, device=device, dtype=torch.float64) - half_w) ** 2
    return torch.exp(m * di[None, :, None]) * torch.exp(m * dj[None, None, :])


def vignette(x: torch.Tensor, intensity: torch.Tensor) -> torch.Tensor:
    """Each pixel times its `vignette_gain`, rounded to even (uint8) or clamped (float)."""
    gain = vignette_gain(intensity, *x.shape[-2:], x.device).to(torch.float32)
    return finish(as_float32(x) * _per_pixel(gain, x), x)


# -- fog, rain, snow ------------------------------------------------------------------------------

FOG_OCTAVES = (3, 6, 12)  # cells across the image per octave of the fog texture
FOG_WEIGHTS = (0.5, 0.3, 0.2)


def fog_grid_sizes() -> list[int]:
    """The number of grid values per octave of the fog texture (a (cells + 1)^2 grid each)."""
    return [(c + 1) * (c + 1) for c in FOG_OCTAVES]


def _upsample_matrix(size: int, cells: int, device: torch.device) -> torch.Tensor:
    """(size, cells + 1) float64: corner-aligned linear interpolation of ``cells + 1`` grid points
    over ``size`` pixels, as a matrix (two weights per row: 1 - w on the low point, w on the next)."""
    pos = torch.arange(size, device=device, dtype=torch.float64) * (cells / max(size - 1, 1))
    low = torch.clamp(torch.floor(pos), max=cells - 1).to(torch.int64)
    weight = pos - low
    matrix = torch.zeros(size, cells + 1, dtype=torch.float64, device=device)
    matrix.scatter_(1, low[:, None], (1.0 - weight)[:, None])
    return matrix.scatter_(1, (low + 1)[:, None], weight[:, None])


def fog_texture(grids: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(B, H, W) float64 in [0, 1]: the octaves of ``grids`` (B, sum of `fog_grid_sizes`), each a
    (cells + 1)^2 grid of values in [0, 1) upsampled bilinearly with corners aligned (rows, then
    columns: two small matrix products), weighted by `FOG_WEIGHTS`."""
    grids = grids.to(torch.float64)
    out = torch.zeros(grids.shape[0], height, width, dtype=torch.float64, device=grids.device)
    start = 0
    for cells, weight in zip(FOG_OCTAVES, FOG_WEIGHTS):
        n = cells + 1
        g = grids[:, start : start + n * n].reshape(-1, n, n)
        start += n * n
        rows = _upsample_matrix(height, cells, grids.device) @ g  # (B, H, n)
        out += weight * (rows @ _upsample_matrix(width, cells, grids.device).T)
    return out


def fog(x: torch.Tensor, intensity: torch.Tensor, gray: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
    """rpp's fog: the image blended towards its luma by ``gray[b]``, then towards the fog's colour
    by alpha = clamp(a + intensity[b], 0, 1); the fog texture t (`fog_texture`) gives the alpha
    mask a = 0.5 t and the fog's grey level 255 (0.75 + 0.25 t)."""
    t = fog_texture(grids.to(x.device), *x.shape[-2:])
    scale = _full_scale(x)
    alpha = _per_pixel((0.5 * t + intensity.to(x.device, torch.float64).reshape(-1, 1, 1)).clamp_(0.0, 1.0)
                       .to(torch.float32), x)
    colour = _per_pixel((scale * (0.75 + 0.25 * t)).to(torch.float32), x)
    g = _per_sample(gray, x)
    xf = as_float32(x)
    greyed = xf * (1.0 - g) + grey(x) * g
    return finish(greyed * (1.0 - alpha) + colour * alpha, x)


RAIN_LEVEL = 200.0  # rpp's RAIN_INTENSITY_8U
SNOW_FLAKE = ((0, 50, 75, 50, 0), (40, 80, 120, 80, 40), (75, 120, 255, 120, 75), (40, 80, 120, 80, 40),
              (0, 50, 75, 50, 0))  # rpp's snow_mat, added at a flake's 5x5 pixels


def rain_drop_count(percentage: float, height: int, width: int) -> int:
    """rpp's number of drops: trunc(percentage * 0.004 * H * W)."""
    return int(percentage * 0.004 * height * width)


def rain_layer(keys: torch.Tensor, height: int, width: int, percentage: float, drop_width: int,
               drop_length: int, slant: float, device: torch.device) -> torch.Tensor:
    """(B, H, W) bool: where rpp's rain layer holds a drop. Drop i of sample b starts at column
    x0 in [0, trunc(W - s - 1)] and row y0 in [0, H - L - 1] (s = sin(slant) L, L the drop
    length); its pixel j < L is row y0 + j, columns trunc(x0 + j s / L) + k for k < drop_width,
    cut at the image's edges."""
    b, n = keys.reshape(-1).shape[0], rain_drop_count(percentage, height, width)
    layer = torch.zeros(b, height * width + 1, dtype=torch.bool, device=device)
    if n == 0:
        return layer[:, :-1].reshape(b, height, width)
    s = math.sin(slant) * drop_length
    x_high = max(int(width - s - 1), 0) + 1
    y_high = max(height - drop_length - 1, 0) + 1
    x0 = counter_integers(keys, n, torch.full((b,), x_high), device, stream=1)
    y0 = counter_integers(keys, n, torch.full((b,), y_high), device, stream=2)
    j = torch.arange(drop_length, device=device)
    cols = torch.trunc(x0[:, :, None] + j.to(torch.float64) * (s / drop_length)).to(torch.int64)  # (B, N, L)
    cols = cols[..., None] + torch.arange(drop_width, device=device)  # (B, N, L, width)
    rows = (y0[:, :, None] + j)[..., None].expand_as(cols)
    inside = (cols >= 0) & (cols < width) & (rows < height)
    flat = torch.where(inside, rows * width + cols, height * width).reshape(b, -1)  # outside: a spare slot
    layer.scatter_(1, flat, True)
    return layer[:, :-1].reshape(b, height, width)


def rain(x: torch.Tensor, transparency: torch.Tensor, keys: torch.Tensor, percentage: float, drop_width: int,
         drop_length: int, slant: float) -> torch.Tensor:
    """rpp's rain: every pixel x + (layer - x) alpha[b], the layer 200 grey levels on the drops
    (`rain_layer`) and 0 elsewhere, so the whole image darkens by (1 - alpha) as in rpp."""
    drops = rain_layer(keys, *x.shape[-2:], percentage, drop_width, drop_length, slant, x.device)
    layer = _per_pixel(drops.to(torch.float32) * (RAIN_LEVEL / 255.0 * _full_scale(x)), x)
    xf = as_float32(x)
    return finish(xf + (layer - xf) * _per_sample(transparency, x), x)


def snow_flake_count(snow: torch.Tensor, height: int, width: int, channels: int) -> torch.Tensor:
    """rpp's flakes per sample: trunc(snow / 100 * H * W * C) (int64 (B,))."""
    return torch.trunc(snow.to(torch.float64) / 100.0 * (height * width * channels)).to(torch.int64)


def snow_layer(keys: torch.Tensor, snow: torch.Tensor, height: int, width: int, channels: int,
               device: torch.device) -> torch.Tensor:
    """(B, H, W) int32: the grey levels rpp's flakes add. Flake i of sample b (i below its
    `snow_flake_count`) has its top-left corner at row floor(u H), column floor(u' W) and adds
    `SNOW_FLAKE` to the 5x5 pixels there, only when row + 5 < H and column + 5 < W."""
    b = keys.reshape(-1).shape[0]
    counts = snow_flake_count(snow, height, width, channels).to(device)
    n = int(counts.max()) if b else 0
    layer = torch.zeros(b, height * width + 1, dtype=torch.int32, device=device)
    if n > 0:
        rows = counter_integers(keys, n, torch.full((b,), height), device, stream=1)
        cols = counter_integers(keys, n, torch.full((b,), width), device, stream=2)
        fits = (rows + 5 < height) & (cols + 5 < width) & (torch.arange(n, device=device)[None, :] < counts[:, None])
        dy, dx = torch.meshgrid(torch.arange(5, device=device), torch.arange(5, device=device), indexing="ij")
        offsets = (dy * width + dx).reshape(-1)  # the stamp's 25 pixels
        flat = torch.where(fits[..., None], (rows * width + cols)[..., None] + offsets, height * width)
        stamp = torch.tensor(SNOW_FLAKE, dtype=torch.int32, device=device).reshape(-1).expand_as(flat)
        layer.scatter_add_(1, flat.reshape(b, -1), stamp.reshape(b, -1).contiguous())
    return layer[:, :-1].reshape(b, height, width)


def snow(x: torch.Tensor, snow: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """rpp's snow: the flakes' levels (`snow_layer`) added to every channel, saturated (rpp adds
    them one flake at a time, each saturating; the sum saturated once is the same)."""
    layer = snow_layer(keys, snow, *x.shape[-2:], x.shape[-3], x.device)
    added = _per_pixel(layer.to(torch.float32) / (255.0 / _full_scale(x)), x)
    return finish(as_float32(x) + added, x)


# -- pixelate -------------------------------------------------------------------------------------


def pixelate_size(percent: torch.Tensor, size: int) -> torch.Tensor:
    """rpp's reduced side per sample: trunc(size * (100 - percent) / 100), at least 1 (int64 (B,))."""
    small = torch.trunc(size * (100.0 - percent.to(torch.float64)) / 100.0).to(torch.int64)
    return small.clamp_(min=1)


def _pixelate_axis(small: torch.Tensor, size: int, device: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each output pixel along an axis: the reduced pixel rpp's nearest upsize takes,
    floor((2 d + 1) small / (2 size)), and the bilinear taps of that pixel's downsize sample at
    (s + 0.5) size / small - 0.5: low index, high index, high weight (B, size)."""
    small = small.to(device).reshape(-1, 1)
    d = torch.arange(size, device=device)[None, :]
    reduced = torch.div((2 * d + 1) * small, 2 * size, rounding_mode="floor").clamp_(max=small - 1)
    pos = ((reduced.to(torch.float64) + 0.5) * size / small - 0.5).clamp_(min=0.0)
    low = torch.clamp(torch.floor(pos), max=size - 1).to(torch.int64)
    return low, torch.clamp(low + 1, max=size - 1), (pos - low).to(torch.float32)


def pixelate(x: torch.Tensor, percent: torch.Tensor) -> torch.Tensor:
    """rpp's pixelate: a bilinear (not antialiased, half-pixel centres) resize to `pixelate_size`,
    rounded, then a nearest resize back; both as one gather per axis (rows, then columns)."""
    height, width = x.shape[-2:]
    y0, y1, wy = _pixelate_axis(pixelate_size(percent, height), height, x.device)
    x0, x1, wx = _pixelate_axis(pixelate_size(percent, width), width, x.device)
    xf = as_float32(x)
    lead = (1,) * (x.ndim - 4)  # a clip's frames

    def rows(index: torch.Tensor) -> torch.Tensor:
        return torch.gather(xf, -2, index.reshape(-1, *lead, 1, height, 1).expand(*x.shape[:-2], height, width))

    def cols(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.gather(t, -1, index.reshape(-1, *lead, 1, 1, width).expand_as(t))

    wy_, wx_ = wy.reshape(-1, *lead, 1, height, 1), wx.reshape(-1, *lead, 1, 1, width)
    vertical = rows(y0) * (1.0 - wy_) + rows(y1) * wy_
    return finish(cols(vertical, x0) * (1.0 - wx_) + cols(vertical, x1) * wx_, x)


# -- noise (DALI's noise.salt_and_pepper, noise.shot) ----------------------------------------------


def _noise_shape(x: torch.Tensor, per_channel: bool) -> tuple[int, ...]:
    """A sample's noise shape: every element, or one value per pixel shared by its channels."""
    shape = tuple(x.shape[1:])
    return shape if per_channel else (*shape[:-3], 1, *shape[-2:])


def salt_and_pepper(x: torch.Tensor, prob: torch.Tensor, salt_vs_pepper: torch.Tensor, keys: torch.Tensor,
                    salt: float, pepper: float, per_channel: bool) -> torch.Tensor:
    """DALI's noise.salt_and_pepper: with n = `counter_uniform` per pixel (per element when
    ``per_channel``), n < prob * salt_vs_pepper takes ``salt``, else n < prob takes ``pepper``,
    else the input; salt and pepper in [0, 1] of full scale (uint8: rounded to levels)."""
    n = counter_uniform(keys, _noise_shape(x, per_channel), x.device)
    p = _per_sample(prob, n, torch.float64)
    s = p * _per_sample(salt_vs_pepper, n, torch.float64)
    scale = _full_scale(x)
    salt_v = torch.tensor(salt * scale if x.is_floating_point() else round(salt * scale), dtype=x.dtype,
                          device=x.device)
    pepper_v = torch.tensor(pepper * scale if x.is_floating_point() else round(pepper * scale), dtype=x.dtype,
                            device=x.device)
    return torch.where(n < s, salt_v, torch.where(n < p, pepper_v, x))


_POISSON_MAX_STEPS = 100_000


def _poisson_pmf(k: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    """P(Poisson(rate) = k), float64, from logarithms (1 at k = 0 for a rate of 0)."""
    pmf = torch.exp(k * torch.log(rate.clamp(min=1e-300)) - rate - torch.lgamma(k + 1.0))
    return torch.where(rate > 0, pmf, (k == 0).to(pmf.dtype))


def _poisson_cdf(k: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    """P(Poisson(rate) <= k) = Q(k + 1, rate), the regularised upper incomplete gamma (k >= 0)."""
    return torch.special.gammaincc(k + 1.0, rate)


def poisson_quantile(u: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    """The smallest k with P(Poisson(rate) <= k) >= u, elementwise (float64): the inverse CDF, exact
    for any rate. Starts at the Cornish-Fisher guess with its exact CDF, then walks the
    probability recurrence up or down, each step over the elements not yet there."""
    shape = u.shape
    rate = rate.expand_as(u).reshape(-1)
    u = u.reshape(-1)
    z = math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)
    k = torch.floor(rate + rate.sqrt() * z + (z * z - 1.0) / 6.0 + 0.5).clamp_(min=0.0)
    k = torch.where(rate > 0, k, torch.zeros_like(k))  # a rate of 0 is always 0
    cdf, pmf = _poisson_cdf(k, rate), _poisson_pmf(k, rate)
    active = (cdf < u).nonzero().reshape(-1)
    for _ in range(_POISSON_MAX_STEPS):  # up: k + 1 while the CDF is below u
        if active.numel() == 0:
            break
        k[active] += 1.0
        pmf[active] *= rate[active] / k[active]
        cdf[active] += pmf[active]
        active = active[cdf[active] < u[active]]
    active = ((k > 0) & (cdf - pmf >= u)).nonzero().reshape(-1)
    for _ in range(_POISSON_MAX_STEPS):  # down: k - 1 while the CDF at k - 1 still reaches u
        if active.numel() == 0:
            break
        cdf[active] -= pmf[active]
        pmf[active] *= k[active] / rate[active]
        k[active] -= 1.0
        active = active[(k[active] > 0) & (cdf[active] - pmf[active] >= u[active])]
    return k.reshape(shape)


def poisson_tables(rates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For rates (R,): each one's first k, k_lo = max(0, floor(rate - 9 sqrt(rate) - 10)), and its
    CDF over a window from there (R, K) wide enough for any u of `counter_uniform`'s 32 bits."""
    rates = rates.to(torch.float64)
    low = torch.floor(rates - 9.0 * rates.sqrt() - 10.0).clamp_(min=0.0)
    width = int(math.ceil(18.0 * math.sqrt(float(rates.max())) + 21.0)) if rates.numel() else 1
    ks = low[:, None] + torch.arange(width, device=rates.device, dtype=torch.float64)[None, :]
    below = torch.where(low > 0, torch.special.gammaincc(low.clamp(min=1.0), rates), torch.zeros_like(low))
    return low, below[:, None] + torch.cumsum(_poisson_pmf(ks, rates[:, None]), dim=1)


def poisson_lookup(u: torch.Tensor, row: torch.Tensor, low: torch.Tensor, cdf: torch.Tensor) -> torch.Tensor:
    """`poisson_quantile` of u (N,) at rate ``row`` (N,) of `poisson_tables`: a branchless binary
    search of each row's CDF window (one gather per halving)."""
    width = cdf.shape[1]
    flat, base = cdf.reshape(-1), row * width
    pos = torch.full_like(row, -1)  # the last index whose CDF is below u
    step = 1 << max(width - 1, 0).bit_length()
    while step:
        cand = pos + step
        ok = cand < width
        ok &= torch.gather(flat, 0, base + cand.clamp(max=width - 1)) < u
        pos = torch.where(ok, cand, pos)
        step >>= 1
    return low[row] + (pos + 1).clamp_(max=width - 1).to(torch.float64)


TABLE_MIN_FACTOR = 1.0  # below, a sample's rates reach past 255 and its CDF table would be wide: walk instead


def shot_noise(x: torch.Tensor, factor: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """DALI's noise.shot: k ~ Poisson(max(0, v) / factor[b]) per element, the Poisson inverse CDF
    of `counter_uniform`, and k * factor (float32) rounded half up and saturated; ``v`` in grey
    levels (float input: 255 x, the result / 255 and clamped to [0, 1]). A factor of 0 is the
    identity. uint8 samples with a factor of at least `TABLE_MIN_FACTOR` look each pixel up in a
    CDF table per grey level (`poisson_tables`); the others walk each element's own CDF
    (`poisson_quantile`); both are the exact inverse CDF."""
    b = x.shape[0]
    f64 = _per_sample(factor, x, torch.float64)
    safe = torch.where(f64 > 0, f64, torch.ones_like(f64))
    u = counter_uniform(keys, tuple(x.shape[1:]), x.device)
    k = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    tabled = (safe.reshape(b) >= TABLE_MIN_FACTOR) & (not x.is_floating_point())
    walked = (~tabled).nonzero().reshape(-1)
    if walked.numel():
        rate = (x.index_select(0, walked).to(torch.float64) * (255.0 / _full_scale(x))).clamp_(min=0.0)
        k[walked] = poisson_quantile(u[walked], rate / safe[walked])
    tabled = tabled.nonzero().reshape(-1)
    if tabled.numel():
        n = tabled.numel()
        rates = torch.arange(256, device=x.device, dtype=torch.float64)[None, :] / safe[tabled].reshape(n, 1)
        low, cdf = poisson_tables(rates.reshape(-1))  # row i * 256 + level
        levels = x.index_select(0, tabled).reshape(n, -1).to(torch.int64)
        row = (levels + 256 * torch.arange(n, device=x.device)[:, None]).reshape(-1)
        k[tabled] = poisson_lookup(u[tabled].reshape(-1), row, low, cdf).reshape(n, *x.shape[1:])
    out = (k.to(torch.float32) * _per_sample(factor, x)) / (255.0 / _full_scale(x))
    return torch.where(f64 > 0, finish(out, x, rounding="half_up"), x)


# -- grid mask (DALI's grid_mask) ------------------------------------------------------------------


def grid_mask_keep(tile: torch.Tensor, ratio: torch.Tensor, angle: torch.Tensor, shift_x: torch.Tensor,
                   shift_y: torch.Tensor, height: int, width: int, device: torch.device) -> torch.Tensor:
    """(B, H, W) bool, True where DALI's grid_mask keeps a pixel: with dx = cos(angle) / tile and
    dy = sin(angle) / tile (float32), fx = x dx - y dy - shift_x / tile and fy = x dy + y dx -
    shift_y / tile; kept where frac(fx) >= ratio or frac(fy) >= ratio."""
    f32 = dict(device=device, dtype=torch.float32)
    tile64, angle64 = tile.to(device, torch.float64), angle.to(device, torch.float64)
    dx = (torch.cos(angle64) / tile64).to(torch.float32).reshape(-1, 1, 1)
    dy = (torch.sin(angle64) / tile64).to(torch.float32).reshape(-1, 1, 1)
    ox = (shift_x.to(device, torch.float32) / tile.to(**f32)).reshape(-1, 1, 1)
    oy = (shift_y.to(device, torch.float32) / tile.to(**f32)).reshape(-1, 1, 1)
    xs = torch.arange(width, **f32)[None, None, :]
    ys = torch.arange(height, **f32)[None, :, None]
    fx = xs * dx - ys * dy - ox
    fy = xs * dy + ys * dx - oy
    r = ratio.to(**f32).reshape(-1, 1, 1)
    return (fx - torch.floor(fx) >= r) | (fy - torch.floor(fy) >= r)


def grid_mask(x: torch.Tensor, tile: torch.Tensor, ratio: torch.Tensor, angle: torch.Tensor,
              shift_x: torch.Tensor, shift_y: torch.Tensor) -> torch.Tensor:
    """Zero the pixels `grid_mask_keep` drops, in every channel and frame."""
    keep = grid_mask_keep(tile, ratio, angle, shift_x, shift_y, *x.shape[-2:], x.device)
    return x * _per_pixel(keep, x).to(x.dtype)
