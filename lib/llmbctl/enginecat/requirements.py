"""What a release needs from the node, read from the installed release (and the driver it implies).

- cuda_major: the N of libcudart.so.N that the release's compiled extensions link (DT_NEEDED of
  its .so files, read with a small ELF reader: no readelf, no pyelftools);
- torch: the Requires-Dist pin of its METADATA;
- glibc: the manylinux tag of its wheel (WHEEL file), i.e. the oldest glibc it runs on; where the
  WHEEL names none (vLLM's says linux_x86_64), the newest GLIBC_x.y its .so files need (SHT_GNU_verneed);
- rocm: the N.M of a ROCm build (librocm / libamdhip64 DT_NEEDED, or +rocmN.M in the version).

A platform plugin whose runtime is not a Python package (vllm-ascend: CANN) is read from its own
wheel instead (read_plugin_requirements): the torch / torch-npu pins of its METADATA, Requires-Python,
the glibc of its wheel tag, and the CANN and Python versions its Prerequisites section names.

CUDA_MIN_DRIVER maps a CUDA major to the oldest NVIDIA driver branch that runs it (CUDA 12.x:
525.60.13, CUDA 13.x: 580.65.06; NVIDIA's CUDA toolkit release notes, minor-version compatibility).
driver_problem() is the one decision 'this driver cannot run that release' (verify and preflight).
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from llmb.finding import Finding

CUDA_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", str(text))[:3])


def driver_problem(driver: str | None, cuda_major: int | None) -> dict[str, str] | None:
    """None when the driver runs a release linked against CUDA ``cuda_major``; else the finding."""
    if cuda_major is None or not driver:
        return None
    need = CUDA_MIN_DRIVER.get(int(cuda_major))
    if need is None:
        return {"expected": f"a driver for CUDA {cuda_major} (not in CUDA_MIN_DRIVER)", "found": str(driver)}
    if _version_tuple(driver) < _version_tuple(need):
        return {"expected": f"NVIDIA driver >= {need} (CUDA {cuda_major})", "found": str(driver)}
    return None


_DRIVER = re.compile(r"^\d{2,4}(\.\d{1,4}){1,2}$")


def driver_from_query(text: str | None) -> str | None:
    """The driver version in `nvidia-smi --query-gpu=driver_version --format=csv,noheader` output (one
    line per GPU, all alike); None when it is not such output (no driver, an error message)."""
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    if not lines or not all(_DRIVER.match(ln) for ln in lines) or len(set(lines)) != 1:
        return None
    return lines[0]


def driver_finding(release: str, requirements: dict[str, Any] | None, driver: str | None,
                   vendor: str | None = "nvidia") -> Finding | None:
    """The check 'can this node's driver run the chosen release' (engine.driver) as verify and preflight
    report it; None when it does not apply (not NVIDIA, no CUDA major)."""
    req = requirements or {}
    if vendor != "nvidia" or req.get("cuda_major") is None:
        return None
    cuda = req["cuda_major"]
    need = req.get("nvidia_driver_min") or CUDA_MIN_DRIVER.get(int(cuda)) or "?"
    problem = driver_problem(driver, cuda) if driver else {"found": "not reported"}
    return Finding(
        "engine.driver",
        ok=problem is None,
        expected=f"NVIDIA driver >= {need} for {release} (links libcudart.so.{cuda})",
        found=driver or "not reported",
        fix=f"{release} needs CUDA {cuda}: install NVIDIA driver >= {need} and reboot, or choose an engine "
            "release built for this driver (llmb_engine_version; `scripts/launch-plan --engine-versions`)",
    )


# ----------------------------------------------------------------------------- ELF DT_NEEDED


def _elf_sections(path: Path) -> tuple[bytes, list[tuple[int, int, int, int, int]]] | None:
    """The bytes of a 64-bit little-endian ELF file and its section headers (sh_type, sh_offset,
    sh_size, sh_link, sh_info); None when it is not such a file or its section table is cut short."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        if off + 64 > len(data):
            return None
        _name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, sh_info = struct.unpack_from(
            "<IIQQQQII", data, off)
        sections.append((sh_type, sh_offset, sh_size, sh_link, sh_info))
    return data, sections


def elf_needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a 64-bit little-endian ELF file ([] when it is not one)."""
    elf = _elf_sections(path)
    if elf is None:
        return []
    data, sections = elf
    out: list[str] = []
    for sh_type, sh_offset, sh_size, sh_link, _info in sections:
        if sh_type != 6 or sh_link >= len(sections):  # SHT_DYNAMIC
            continue
        str_off = sections[sh_link][1]
        for k in range(sh_offset, sh_offset + sh_size, 16):
            tag, val = struct.unpack_from("<qQ", data, k)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", str_off + val)
                out.append(data[str_off + val:end].decode("ascii", "replace"))
    return out


def elf_glibc(path: Path) -> tuple[int, ...] | None:
    """The newest GLIBC_x.y symbol version a 64-bit little-endian ELF file needs (SHT_GNU_verneed),
    i.e. the oldest glibc it loads on; None when it is not such a file or needs none."""
    elf = _elf_sections(path)
    if elf is None:
        return None
    data, sections = elf
    best: tuple[int, ...] | None = None
    for sh_type, sh_offset, _size, sh_link, sh_info in sections:
        if sh_type != 0x6FFFFFFE or sh_link >= len(sections):  # SHT_GNU_verneed
            continue
        strtab = sections[sh_link][1]
        entry = sh_offset
        for _ in range(sh_info):
            _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, entry)
            a = entry + aux
            for _ in range(cnt):
                _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                end = data.index(b"\0", strtab + name)
                m = re.match(r"GLIBC_(\d+(?:\.\d+)+)$", data[strtab + name:end].decode("ascii", "replace"))
                if m:
                    ver = tuple(int(x) for x in m.group(1).split("."))
                    best = ver if best is None or ver > best else best
                if not anext:
                    break
                a += anext
            if not nxt:
                break
            entry += nxt
    return best


def _dist_info(site: Path, dist: str, version: str) -> Path | None:
    want = re.sub(r"[-_.]+", "_", dist).lower()
    for d in sorted(site.glob("*.dist-info")):
        name = d.name[: -len(".dist-info")]
        n, _, v = name.rpartition("-")
        if re.sub(r"[-_.]+", "_", n).lower() == want and (not version or v.split("+")[0] == version.split("+")[0]):
            return d
    return None


def _so_files(site: Path, info: Path) -> list[Path]:
    record = (info / "RECORD").read_text(encoding="utf-8", errors="replace") if (info / "RECORD").is_file() else ""
    out = []
    for line in record.splitlines():
        rel = line.split(",", 1)[0]
        if ".so" in Path(rel).name and not rel.startswith(("../", "/")):
            out.append(site / rel)
    return out


def _glibc_of(site: Path, info: Path) -> str | None:
    """The newest GLIBC_ symbol version the dist's own compiled extensions need."""
    vers = [v for v in (elf_glibc(p) for p in _so_files(site, info)) if v]
    return ".".join(str(x) for x in max(vers)) if vers else None


def _linked(site: Path, info: Path) -> tuple[set, set]:
    """(CUDA majors of libcudart.so.N, ROCm libraries) that the .so files of one dist link."""
    cuda: set = set()
    rocm: set = set()
    for path in _so_files(site, info):
        for needed in elf_needed(path):
            m = re.match(r"libcudart\.so\.(\d+)", needed)
            if m:
                cuda.add(int(m.group(1)))
            if needed.startswith(("libamdhip64", "librocm")):
                rocm.add(needed)
    return cuda, rocm


def read_requirements(venv: Path, dist: str, version: str) -> dict[str, Any]:
    """The requirements of an installed release (see the module doc)."""
    sites = sorted(Path(venv).glob("lib/python*/site-packages"))
    if not sites:
        return {}
    site = sites[0]
    info = _dist_info(site, dist, version)
    if info is None:
        return {}
    out: dict[str, Any] = {}
    meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace") if (info / "METADATA").is_file() else ""
    for line in meta.splitlines():
        m = re.match(r"Requires-Dist:\s*torch(?![\w.-])\s*([^;]*?)\s*(;.*)?$", line)
        if m and "extra ==" not in (m.group(2) or ""):
            out["torch"] = m.group(1).strip().strip("()") or "any"
    wheel = (info / "WHEEL").read_text(encoding="utf-8", errors="replace") if (info / "WHEEL").is_file() else ""
    tags = sorted(set(re.findall(r"manylinux_(\d+)_(\d+)", wheel)), key=lambda t: (int(t[0]), int(t[1])))
    legacy = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
    if tags:
        out["glibc"] = f"{tags[0][0]}.{tags[0][1]}"
    else:
        for tag, glibc in legacy.items():
            if tag in wheel:
                out["glibc"] = glibc
                break
    if "glibc" not in out:  # a wheel tagged linux_x86_64 (vLLM renames its wheel file only): the
        glibc = _glibc_of(site, info)  # symbol versions its own .so files need
        if glibc:
            out["glibc"] = glibc
            out["glibc_from"] = "GLIBC_ symbol versions of its .so files (the WHEEL tag names no manylinux)"
    cuda, rocm = _linked(site, info)
    if not cuda:  # no compiled extension of its own (SGLang): the CUDA of the torch it pins
        for extra in ("sgl_kernel", "torch"):
            other = _dist_info(site, extra, "")
            if other is not None:
                cuda, more = _linked(site, other)
                rocm |= more
                if cuda:
                    out["cuda_from"] = other.name[: -len(".dist-info")]
                    break
    if cuda:
        out["cuda_major"] = max(cuda)
        out["cuda_libs"] = [f"libcudart.so.{c}" for c in sorted(cuda)]
    m = re.search(r"\+rocm(\d+\.\d+)", version)
    if m:
        out["rocm"] = m.group(1)
    elif rocm:
        out["rocm_libs"] = sorted(rocm)
    if "cuda_major" in out:
        out["nvidia_driver_min"] = CUDA_MIN_DRIVER.get(out["cuda_major"])
    return out


def _meta_pin(meta: str, name: str) -> str | None:
    """The version specifier of ``Requires-Dist: <name>`` (no extra, any spelling of the name)."""
    want = re.sub(r"[-_.]+", "-", name).lower()
    for line in meta.splitlines():
        m = re.match(r"Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*([^;]*?)\s*(;.*)?$", line)
        if m and re.sub(r"[-_.]+", "-", m.group(1)).lower() == want and "extra ==" not in (m.group(3) or ""):
            return m.group(2).strip().strip("()") or "any"
    return None


def read_plugin_requirements(venv: Path, dist: str, version: str) -> dict[str, Any]:
    """What a platform plugin (vllm-ascend) needs, read from its installed wheel's METADATA and WHEEL:
    torch and torch-npu pins (Requires-Dist), Python (Requires-Python, narrowed by the Prerequisites
    section of its description: 'Python >= 3.10, < 3.12'), CANN ('CANN == 9.0.0', same section), the glibc
    of its manylinux tag. ``requirements_from`` names the files."""
    sites = sorted(Path(venv).glob("lib/python*/site-packages"))
    info = _dist_info(sites[0], dist, version) if sites else None
    if info is None:
        return {}
    meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace") if (info / "METADATA").is_file() else ""
    wheel = (info / "WHEEL").read_text(encoding="utf-8", errors="replace") if (info / "WHEEL").is_file() else ""
    out: dict[str, Any] = {}
    for name, key in (("torch", "torch"), ("torch-npu", "torch_npu")):
        pin = _meta_pin(meta, name)
        if pin:
            out[key] = pin
    from_ = ["METADATA Requires-Dist (torch, torch-npu)"]
    prereq = []
    m = re.search(r"^\s*[-*]\s*CANN\s*(==|>=)\s*([0-9][0-9A-Za-z.]*)", meta, re.M)
    if m:
        out["cann"] = f"{m.group(1)}{m.group(2)}"
        prereq.append("CANN")
    m = re.search(r"^\s*[-*]\s*Python\s*(>=\s*[0-9.]+\s*,\s*<\s*[0-9.]+)", meta, re.M)
    req_py = re.search(r"^Requires-Python:\s*(\S.*?)\s*$", meta, re.M)
    if m:
        out["python"] = re.sub(r"\s+", "", m.group(1))
        prereq.append("Python")
    elif req_py:
        out["python"] = re.sub(r"\s+", "", req_py.group(1))
        from_.append("METADATA Requires-Python")
    if prereq:
        from_.append(f"the Prerequisites section of its METADATA description ({', '.join(prereq)})")
    tags = sorted(set(re.findall(r"manylinux_(\d+)_(\d+)", wheel)), key=lambda t: (int(t[0]), int(t[1])))
    if tags:
        out["glibc"] = f"{tags[0][0]}.{tags[0][1]}"
        from_.append("WHEEL tag (glibc)")
    out["requirements_from"] = f"{info.name}: " + "; ".join(from_)
    return out
