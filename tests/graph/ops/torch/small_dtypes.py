#!/usr/bin/python3
"""Writes small_dtypes.safetensors: f16, s8, u8 and s16 tensors made by PyTorch, with what
PyTorch computes from them, for tests/graph/ops/small_dtypes_test.cpp to compare axle with.

    /usr/bin/python3 small_dtypes.py write small_dtypes.safetensors   # Debian's python3-torch 1.13
    /usr/bin/python3 small_dtypes.py check FILE   # FILE written by axle: same tensors, same values

PyTorch 1.13 has no safetensors module, so the file is written here in the layout of the
reference implementation (and of axle's save_safetensors): an 8-byte little-endian header length,
compact JSON, tensors by falling dtype rank then name, the header padded with spaces to 8 bytes.
"""
import json
import struct
import sys

import torch

DTYPES = {  # safetensors name, rank in the reference implementation's Dtype enum
    torch.bool: ("BOOL", 0), torch.uint8: ("U8", 1), torch.int8: ("I8", 2),
    torch.int16: ("I16", 5), torch.float16: ("F16", 7), torch.bfloat16: ("BF16", 8),
    torch.int32: ("I32", 9), torch.float32: ("F32", 11), torch.float64: ("F64", 12),
    torch.int64: ("I64", 13),
}


def tensors():
    t = {}
    # Every f16 bit pattern, and PyTorch's f32 of each.
    all_bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    t["f16_all_bits"] = all_bits
    t["f16_all_bits.to_f32"] = all_bits.float()
    # f32 values across f16's range and past it (ties, subnormals, overflow, specials), and
    # PyTorch's f16, s8 and u8 of each.
    g = torch.Generator().manual_seed(7)
    spread = torch.randn(4000, generator=g) * torch.pow(2.0, torch.randint(-26, 18, (4000,), generator=g).float())
    specials = torch.tensor([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e5, -1e5,
                             2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -14, 0.33325,
                             1.0009765625 + 2.0 ** -11, 2049.0, 2051.0, 127.9, 128.0, 255.5,
                             256.0, 300.7, -128.5, -129.0, float("inf"), float("-inf"),
                             float("nan")])
    f32 = torch.cat([specials, spread])
    t["f32_values"] = f32
    t["f32_values.to_f16"] = f32.half()
    finite_small = f32[f32.abs() < 1000]  # float -> integer past 32 bits is undefined in C
    t["f32_small"] = finite_small
    t["f32_small.to_s8"] = finite_small.to(torch.int8)
    t["f32_small.to_u8"] = finite_small.to(torch.uint8)
    f64 = torch.randn(1000, generator=g, dtype=torch.float64) * 3000
    t["f64_values"] = f64
    t["f64_values.to_f16"] = f64.half()
    # Every s8 and u8, some s16.
    s8 = torch.arange(-128, 128, dtype=torch.int16).to(torch.int8)
    u8 = torch.arange(0, 256, dtype=torch.int16).to(torch.uint8)
    s16 = torch.randint(-32768, 32768, (256,), generator=g, dtype=torch.int64).to(torch.int16)
    t["s8_all"], t["u8_all"], t["s16_values"] = s8, u8, s16
    # Arithmetic as PyTorch computes it in these dtypes.
    t["u8_all.add_s8_all"] = u8 + s8.flip(0)          # promotes to s16
    t["u8_all.mul_u8_all"] = u8 * u8.flip(0)          # wraps in u8
    t["s8_all.mul_s8_all"] = s8 * s8.flip(0)          # wraps in s8
    t["s16_values.mul_s16_values"] = s16 * s16.flip(0)
    t["u8_all.add_300"] = u8 + 300                    # an integer scalar keeps u8
    t["u8_all.mul_1.5"] = u8 * 1.5                    # a float scalar gives f32
    h = (torch.randn(512, generator=g) * 30).half()
    k = (torch.randn(512, generator=g) * 30).half()
    t["f16_a"], t["f16_b"] = h, k
    t["f16_a.mul_f16_b.add_f16_a"] = h * k + h        # each op rounds to f16
    t["f16_a.div_f16_b"] = h / k
    t["f16_a.sum"] = h.sum()
    t["f16_a.mean"] = h.mean()
    return t


def write(path, named):
    order = sorted(named.items(), key=lambda item: item[0])
    order.sort(key=lambda item: DTYPES[item[1].dtype][1], reverse=True)  # stable: names stay
    header, blobs, offset = {}, [], 0
    for name, value in order:
        data = value.contiguous().view(torch.uint8).numpy().tobytes() if value.dim() else \
            value.reshape(1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": DTYPES[value.dtype][0], "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode())
        for data in blobs:
            f.write(data)


def read(path):
    by_name = {name: dtype for dtype, (name, _) in DTYPES.items()}
    raw = open(path, "rb").read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = raw[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8)
        out[name] = flat.view(by_name[entry["dtype"]]).reshape(entry["shape"])
    return out


def check(path):
    want, got = tensors(), read(path)
    assert sorted(want) == sorted(got), f"names differ: {sorted(set(want) ^ set(got))}"
    for name, value in want.items():
        other = got[name]
        assert other.dtype == value.dtype and other.shape == value.shape, name
        same = value.view(torch.uint8) if value.dim() else value.reshape(1).view(torch.uint8)
        theirs = other.view(torch.uint8) if other.dim() else other.reshape(1).view(torch.uint8)
        assert torch.equal(same, theirs), f"{name}: values differ"
    print(f"{path}: {len(want)} tensors, every value as PyTorch's")


if __name__ == "__main__":
    torch.manual_seed(0)
    if sys.argv[1] == "write":
        write(sys.argv[2], tensors())
    else:
        check(sys.argv[2])
