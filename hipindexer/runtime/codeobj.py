"""Minimal ELF64 reader for GPU code objects (gfx950 .hsaco, sm_90a .cubin).

Pure Python so both build.py and the runtime can check what a code object
says about itself (kernel symbols, parameter size, resources) without any
vendor tool. msgpack is only needed for the AMDGPU metadata note and is
imported lazily there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EM_AMDGPU = 224
EM_CUDA = 190
NT_AMDGPU_METADATA = 32

_SHT_SYMTAB = 2
_SHT_NOTE = 7

# .nv.info attribute encodings (cubin): every entry is fmt(u8) attr(u8)
# then a u16 that is either the value (NVAL/BVAL/HVAL) or the byte length
# of the payload that follows (SVAL).
_EIFMT_SVAL = 0x04
EIATTR_PARAM_CBANK = 0x0A
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19


class CodeObjectError(ValueError):
    pass


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class Elf:
    def __init__(self, data: bytes):
        if len(data) < 64 or data[:4] != b"\x7fELF":
            raise CodeObjectError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise CodeObjectError("not a little-endian ELF64 file")
        self.data = bytes(data)
        self.osabi = data[7]
        self.abiversion = data[8]
        self.machine = struct.unpack_from("<H", data, 18)[0]
        self.flags = struct.unpack_from("<I", data, 48)[0]
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        strtab_off = raw[shstrndx][4] if shnum else 0
        self.sections = [
            Section(self._cstr(strtab_off + r[0]), r[1], r[4], r[5], r[6], r[9]) for r in raw
        ]

    def _cstr(self, off: int) -> str:
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode("utf-8", "replace")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, sec: Section) -> bytes:
        return self.data[sec.offset : sec.offset + sec.size]

    def notes(self):
        """Yield (name, type, desc) for every note in every SHT_NOTE section."""
        for sec in self.sections:
            if sec.type != _SHT_NOTE:
                continue
            d = self.section_bytes(sec)
            i = 0
            while i + 12 <= len(d):
                namesz, descsz, ntype = struct.unpack_from("<III", d, i)
                i += 12
                name = d[i : i + namesz].rstrip(b"\0").decode("utf-8", "replace")
                i += (namesz + 3) & ~3
                desc = d[i : i + descsz]
                i += (descsz + 3) & ~3
                yield name, ntype, desc

    def symbols(self) -> dict[str, int]:
        """Symbol name -> st_info for every entry of .symtab."""
        out = {}
        for sec in self.sections:
            if sec.type != _SHT_SYMTAB:
                continue
            strtab = self.sections[sec.link]
            d = self.section_bytes(sec)
            for i in range(0, len(d) - 23, 24):
                st_name, st_info = struct.unpack_from("<IB", d, i)
                if st_name:
                    out[self._cstr(strtab.offset + st_name)] = st_info
        return out


def amdgpu_metadata(data: bytes) -> dict:
    """The msgpack AMDGPU metadata note (code object v3+) as a dict."""
    elf = Elf(data)
    if elf.machine != EM_AMDGPU:
        raise CodeObjectError(f"e_machine {elf.machine} is not EM_AMDGPU ({EM_AMDGPU})")
    for name, ntype, desc in elf.notes():
        if name == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            import msgpack  # only the AMD path needs it

            return msgpack.unpackb(desc, raw=False, strict_map_key=False)
    raise CodeObjectError("no NT_AMDGPU_METADATA note")


def amdgpu_kernel(data: bytes, symbol: str) -> dict:
    """Metadata of one kernel (matched by .name, the extern "C" symbol)."""
    meta = amdgpu_metadata(data)
    for k in meta.get("amdhsa.kernels", []):
        if k.get(".name") == symbol:
            return k
    names = [k.get(".name") for k in meta.get("amdhsa.kernels", [])]
    raise CodeObjectError(f"kernel {symbol!r} not in code object (has {names})")


def amdgpu_param_struct(kernel_meta: dict) -> tuple[int, int]:
    """(offset, size) of the explicit by-value argument; hidden args follow it."""
    explicit = [a for a in kernel_meta.get(".args", []) if not a[".value_kind"].startswith("hidden_")]
    if len(explicit) != 1 or explicit[0][".value_kind"] != "by_value":
        raise CodeObjectError(f"expected one by_value argument, got {explicit}")
    return explicit[0][".offset"], explicit[0][".size"]


def cuda_nv_info(data: bytes, symbol: str) -> list[tuple[int, int, int | bytes]]:
    """Attributes of `.nv.info.<symbol>` as (fmt, attr, value-or-payload)."""
    elf = Elf(data)
    if elf.machine != EM_CUDA:
        raise CodeObjectError(f"e_machine {elf.machine} is not EM_CUDA ({EM_CUDA})")
    sec = elf.section(".nv.info." + symbol)
    if sec is None:
        raise CodeObjectError(f"no .nv.info.{symbol} section (kernel not in cubin?)")
    d = elf.section_bytes(sec)
    out, i = [], 0
    while i + 4 <= len(d):
        fmt, attr, v = d[i], d[i + 1], struct.unpack_from("<H", d, i + 2)[0]
        if fmt == _EIFMT_SVAL:
            out.append((fmt, attr, d[i + 4 : i + 4 + v]))
            i += 4 + v
        else:
            out.append((fmt, attr, v))
            i += 4
    if i != len(d):
        raise CodeObjectError(f".nv.info.{symbol}: trailing bytes, format not understood")
    return out


def cuda_params(data: bytes, symbol: str) -> list[dict]:
    """Kernel parameters from EIATTR_KPARAM_INFO: ordinal, offset, size (bytes).

    KPARAM_INFO payload: u32 index, u16 ordinal, u16 offset, u32 flags whose
    bits 18..31 hold the size. The offset is inside the parameter buffer; an
    over-aligned struct (alignas(64)) gets a non-zero offset there because the
    constant bank's parameter area itself starts at a 16-byte boundary.
    """
    params = []
    for fmt, attr, v in cuda_nv_info(data, symbol):
        if attr == EIATTR_KPARAM_INFO and fmt == _EIFMT_SVAL:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", v)
            params.append({"ordinal": ordinal, "offset": offset, "size": (flags >> 18) & 0x3FFF})
    return sorted(params, key=lambda p: p["ordinal"])


def cuda_param_buffer_size(data: bytes, symbol: str) -> int | None:
    for fmt, attr, v in cuda_nv_info(data, symbol):
        if attr == EIATTR_CBANK_PARAM_SIZE and fmt != _EIFMT_SVAL:
            return v
    return None
