"""The dynamic loader's view of a program, for a bundle (native/bundle.py): what `ldd` maps, the directories the
loader searches unaided, the objects an LD_DEBUG log shows it mapped, and just enough of ELF to read a library's
dynamic section and rewrite its search path in place (no patchelf).

A little-endian ELF64 file is read without loading it: the System V gABI's dynamic section (DT_NEEDED, DT_RPATH,
DT_RUNPATH, DT_STRTAB), the symbol names of .dynsym and the GNU version records (the LSB's 'Symbol Versioning':
SHT_GNU_verneed / SHT_GNU_verdef). `rewrite_search_path` is what a bundle (native/bundle.py) uses to keep a
bundled library's RUNPATH inside the bundle; `Elf.version_needs` gives the symbol versions it needs of the system.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import ArtifactError
from ..system.process import run_command
from .runtimes import NativeBuildError

DEFAULT_SYSTEM_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64")
LDD_TIMEOUT_S = 600


def system_dirs() -> set[Path]:
    """The directories the loader searches with no help: its defaults (with the multiarch ones) and ld.so.cache's."""
    dirs = {Path(d) for d in DEFAULT_SYSTEM_DIRS}
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                 if os.path.exists(p)), None)
    if ldconfig:
        outcome = run_command([ldconfig, "-p"], timeout=60, env={})
        for line in outcome.stdout.splitlines():
            if "=> " in line:
                dirs.add(Path(line.split("=> ", 1)[1].strip()).parent)
    for d in list(dirs):
        dirs.update(p for p in d.glob("*-linux-gnu*") if p.is_dir())
    return {p for d in dirs for p in (d, d.resolve())}


def in_dirs(path: Path, dirs: set[Path]) -> bool:
    """Whether `path` lies directly in one of `dirs`, as named or once its links are resolved."""
    return path.parent in dirs or path.resolve().parent in dirs


def ldd(path: Path) -> list[tuple[str, Path]]:
    """(name asked for, path found) of every library the loader maps for `path`, as `ldd` says with no environment."""
    outcome = run_command(["ldd", str(path)], timeout=LDD_TIMEOUT_S, env={})
    if outcome.returncode != 0:
        raise NativeBuildError(f"ldd '{path}' | {outcome.how_it_ended()}: {(outcome.stderr or outcome.stdout).strip()}")
    found = []
    for line in outcome.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            name, where = (s.strip() for s in line.split("=>", 1))
            if where.startswith("not found"):
                raise NativeBuildError(f"Library '{name}' | not found by the loader for {path}, expected it to resolve "
                                       "(the runtime is not installed completely?)")
            where = where.split(" (0x")[0].strip()
            if where:
                found.append((name, Path(where)))
        elif line.startswith("/"):  # the loader itself
            where = line.split(" (0x")[0].strip()
            found.append((Path(where).name, Path(where)))
    return found


def loaded_objects(log: str, cwd: Path) -> list[Path]:
    """Every object the loader mapped, from its LD_DEBUG=libs,files output: a 'generating link map' line names
    the object as it was asked for; by a bare name, the path is the last 'trying file=' before it."""
    found, tried = [], None
    for line in log.splitlines():
        text = line.split(":", 1)[1].strip() if ":" in line else line.strip()
        if text.startswith("trying file="):
            tried = text[len("trying file="):].strip()
        elif text.startswith("file=") and text.endswith("generating link map"):
            name = text[len("file="):].split(" [", 1)[0]
            where = name if "/" in name else tried
            if where:
                found.append(cwd / where if not where.startswith("/") else Path(where))
    return found




DT_NEEDED, DT_STRTAB, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 14, 15, 29
DT_VERNEED, DT_VERNEEDNUM, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFFE, 0x6FFFFFFF, 0x6FFFFFFC, 0x6FFFFFFD
DT_STRSZ = 10
STRING_TAGS = {DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH, 0x7FFFFFFD, 0x7FFFFFFF, 0x6FFFFEFA, 0x6FFFFEFB, 0x6FFFFEFC}
UNSAFE_TAGS = {0x6FFFFDF8, 0x6FFFFDF5}  # DT_CHECKSUM, DT_GNU_PRELINKED: they cover the bytes a rewrite changes
SHT_DYNSYM = 11
SEARCH_ORIGIN = {"$ORIGIN", "$ORIGIN/", "${ORIGIN}", "${ORIGIN}/", "$ORIGIN/."}


@dataclass
class Elf:
    """A little-endian ELF64 file's dynamic section (System V gABI, 'Dynamic Section'; the GNU version records of
    the LSB's 'Symbol Versioning'), read from the file without loading it."""

    path: Path
    loads: list[tuple[int, int, int]]  # (vaddr, offset, filesz) of each PT_LOAD
    dynamic: list[tuple[int, int]]
    sections: list[tuple[int, int, int, int, int]]  # (type, offset, size, link, entsize)

    @classmethod
    def read(cls, path: Path) -> Elf | None:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF":
                return None
            if head[4] != 2 or head[5] != 1:
                raise ArtifactError(f"Library '{path.name}' | not a little-endian ELF64 file, expected one")
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            fh.seek(phoff)
            phdrs = [struct.unpack("<IIQQQQQQ", fh.read(phentsize)[:56]) for _ in range(phnum)]
            loads = [(p[3], p[2], p[5]) for p in phdrs if p[0] == 1]
            dyn = next((p for p in phdrs if p[0] == 2), None)
            sections = []
            if shoff and shnum:
                fh.seek(shoff)
                for _ in range(shnum):
                    s = struct.unpack("<IIQQQQIIQQ", fh.read(shentsize)[:64])
                    sections.append((s[1], s[4], s[5], s[6], s[9]))
            if dyn is None:
                return cls(path, loads, [], sections)
            fh.seek(dyn[2])
            raw = fh.read(dyn[5])
        dynamic = []
        for i in range(0, len(raw) - 15, 16):
            tag, value = struct.unpack_from("<qQ", raw, i)
            if tag == 0:
                break
            dynamic.append((tag, value))
        return cls(path, loads, dynamic, sections)

    def _offset(self, vaddr: int) -> int:
        for start, offset, size in self.loads:
            if start <= vaddr < start + size:
                return vaddr - start + offset
        raise ArtifactError(f"Library '{self.path.name}' | address {vaddr:#x} is in no loaded segment, expected an "
                            "intact ELF file")

    def _value(self, tag: int) -> int | None:
        return next((v for t, v in self.dynamic if t == tag), None)

    def _strtab(self) -> tuple[int, int]:
        addr, size = self._value(DT_STRTAB), self._value(DT_STRSZ)
        if addr is None or size is None:
            raise ArtifactError(f"Library '{self.path.name}' | no DT_STRTAB, expected a dynamic string table")
        return self._offset(addr), size

    def _string(self, fh, offset: int) -> str:
        table, size = self._strtab()
        fh.seek(table + offset)
        data = fh.read(max(0, min(4096, size - offset)))
        end = data.find(b"\0")
        if end < 0:
            raise ArtifactError(f"Library '{self.path.name}' | unterminated dynamic string, expected an intact file")
        return data[:end].decode("utf-8", "surrogateescape")

    def search_paths(self) -> dict[int, str]:
        """.dynstr offset -> string of each DT_RPATH / DT_RUNPATH."""
        with open(self.path, "rb") as fh:
            return {v: self._string(fh, v) for t, v in self.dynamic if t in (DT_RPATH, DT_RUNPATH)}

    def _version_records(self, fh, verdef: bool) -> Iterator[tuple[int | None, list[int]]]:
        """(.dynstr offset of the library named, or None for a definition; offsets of the version names) of each
        SHT_GNU_verneed (verdef: SHT_GNU_verdef) record."""
        addr = self._value(DT_VERDEF if verdef else DT_VERNEED)
        count = self._value(DT_VERDEFNUM if verdef else DT_VERNEEDNUM)
        if addr is None or not count:
            return
        at = self._offset(addr)
        for _ in range(min(count, 65536)):
            fh.seek(at)
            library: int | None = None
            if verdef:  # Elf64_Verdef: vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next
                _, _, _, cnt, _, aux, nxt = struct.unpack("<HHHHIII", fh.read(20))
            else:  # Elf64_Verneed: vn_version, vn_cnt, vn_file, vn_aux, vn_next
                _, cnt, library, aux, nxt = struct.unpack("<HHIII", fh.read(16))
            names, a = [], at + aux
            for _ in range(min(cnt, 65536)):
                fh.seek(a)
                if verdef:  # Elf64_Verdaux: vda_name, vda_next
                    name, anext = struct.unpack("<II", fh.read(8))
                else:  # Elf64_Vernaux: vna_hash, vna_flags, vna_other, vna_name, vna_next
                    _, _, _, name, anext = struct.unpack("<IHHII", fh.read(16))
                names.append(name)
                if not anext:
                    break
                a += anext
            yield library, names
            if not nxt:
                break
            at += nxt

    def version_needs(self) -> dict[str, list[str]]:
        """Library -> the version names this file needs of it."""
        with open(self.path, "rb") as fh:
            return {self._string(fh, library or 0): [self._string(fh, n) for n in names]
                    for library, names in self._version_records(fh, verdef=False)}

    def string_references(self) -> list[int]:
        """Every .dynstr offset the file refers to besides its search paths: names of the dynamic section,
        symbol names (.dynsym) and version names (verneed, verdef)."""
        refs = [v for t, v in self.dynamic if t in STRING_TAGS - {DT_RPATH, DT_RUNPATH}]
        table, _ = self._strtab()
        dynsyms = [s for s in self.sections if s[0] == SHT_DYNSYM]
        if not dynsyms:  # the symbols' count comes from the section header: without it nothing can be proven
            raise ArtifactError(f"Library '{self.path.name}' | has no section headers for .dynsym, expected them to "
                                "prove its search path shares no bytes with a symbol name")
        with open(self.path, "rb") as fh:
            for _, offset, size, link, entsize in dynsyms:
                if self.sections[link][1] != table:
                    raise ArtifactError(f"Library '{self.path.name}' | .dynsym names another string table than "
                                        "DT_STRTAB, expected one")
                fh.seek(offset)
                data = fh.read(size)
                step = entsize or 24  # Elf64_Sym: st_name first
                refs += [struct.unpack_from("<I", data, i)[0] for i in range(0, len(data) - step + 1, step)]
            for verdef in (False, True):
                for library, names in self._version_records(fh, verdef):
                    refs += names + ([library] if library is not None else [])
        return refs


def rewrite_search_path(path: Path, wanted: str) -> str | None:
    """Make `path`'s DT_RPATH/DT_RUNPATH `wanted` when it names anything else; returns the old string, or None when
    it was already right (or the file has none: its dependencies then come from the program's DT_RPATH).

    In place, no patchelf: the new string is written over the old one in .dynstr and padded with NULs, which the
    loader reads as the end of the string. Refused when `wanted` is longer, when any other name (a symbol, a needed
    library, a version) points into the old string's bytes (linkers share string tails), or when a checksum
    covers them.
    """
    elf = Elf.read(path)
    if elf is None:
        return None
    paths = elf.search_paths()
    ok = SEARCH_ORIGIN if wanted == "$ORIGIN" else {wanted, wanted + "/"}
    if all(set(p.split(":")) <= ok for p in paths.values()):
        return None
    if any(t in UNSAFE_TAGS for t, _ in elf.dynamic):
        raise ArtifactError(f"Library '{path.name}' | carries a prelink checksum, expected none: its search path "
                            f"{next(iter(paths.values()))!r} cannot be rewritten to {wanted!r} in place")
    refs = elf.string_references()
    table, size = elf._strtab()
    old_all = []
    try:
        path.chmod(path.stat().st_mode | 0o200)  # the copy of a read-only library: ours to edit
    except OSError as exc:
        raise ArtifactError(f"Library '{path.name}' | cannot be made writable ({exc.strerror}), expected to rewrite "
                            "its search path in the bundle's copy") from None
    with open(path, "r+b") as fh:
        for start, old in paths.items():
            end = start + len(old.encode("utf-8", "surrogateescape"))
            new = wanted.encode()
            if len(new) > end - start:
                raise ArtifactError(f"Library '{path.name}' | search path {old!r} is shorter than {wanted!r}, expected "
                                    "room to write it in place")
            shared = [r for r in refs if start <= r < end] + [r for r in paths if start < r < end]
            if shared or end >= size:
                raise ArtifactError(f"Library '{path.name}' | search path {old!r} shares its bytes with another name, "
                                    f"expected its own string: not rewritten to {wanted!r}")
            fh.seek(table + start)
            fh.write(new + b"\0" * (end - start - len(new)))
            old_all.append(old)
    return ":".join(old_all)
