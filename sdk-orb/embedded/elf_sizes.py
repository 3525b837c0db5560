"""Flash and static RAM of an ELF32 image, from its section headers.

Flash: what the image stores (vector table, code, read-only data, initial values of .data).
Static RAM: .data and .bss (and .uninit). Usage: python3 elf_sizes.py IMAGE.elf, or
python3 elf_sizes.py --flash NAME IMAGE.elf for the one line `NAME flash bytes: N`.
"""
import struct
import sys

FLASH = (".vector_table", ".text", ".rodata", ".data")
RAM = (".data", ".bss", ".uninit")


def sections(path):
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF" or elf[4] != 1 or elf[5] != 1:
        sys.exit(f"{path}: not a little-endian ELF32 file")
    shoff, = struct.unpack_from("<I", elf, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x2E)
    headers = [struct.unpack_from("<IIIIIIIIII", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name_off, _type, _flags, _addr, _off, size, *_ in headers:
        end = elf.index(b"\0", names_at + name_off)
        out[elf[names_at + name_off:end].decode()] = size
    return out


def main():
    if sys.argv[1] == "--flash":
        s = sections(sys.argv[3])
        print(f"{sys.argv[2]} flash bytes: {sum(s.get(n, 0) for n in FLASH)}")
        return
    s = sections(sys.argv[1])
    text = s.get(".vector_table", 0) + s.get(".text", 0)
    rodata = s.get(".rodata", 0)
    flash = sum(s.get(n, 0) for n in FLASH)
    ram = sum(s.get(n, 0) for n in RAM)
    print(f"flash: {flash} bytes (text {text}, rodata {rodata}, data {s.get('.data', 0)})")
    print(f"static RAM: {ram} bytes (data {s.get('.data', 0)}, bss {s.get('.bss', 0) + s.get('.uninit', 0)})")


main()
