//! Checks a shared library's ELF file before `dlopen` maps it: a truncated or foreign file
//! must be refused with a message, not crash kiln when a mapped page past its end is
//! touched (SIGBUS), and an entry point exported as data must not be called (SIGSEGV).
//!
//! Reads only the headers and the dynamic symbol table, with every offset checked against
//! the file's size. Safe code: nothing here runs the library.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
/// Symbol tables and string tables larger than this are not plausible in a plugin.
const MAX_TABLE_BYTES: u64 = 256 << 20;

/// The ELF machine code of the running process, where kiln knows it.
const MACHINE: Option<u16> = if cfg!(target_arch = "x86_64") {
    Some(62)
} else if cfg!(target_arch = "aarch64") {
    Some(183)
} else if cfg!(target_arch = "x86") {
    Some(3)
} else if cfg!(target_arch = "arm") {
    Some(40)
} else if cfg!(target_arch = "riscv64") {
    Some(243)
} else if cfg!(target_arch = "powerpc64") {
    Some(21)
} else {
    None
};

/// Checks that `path` is a complete shared library for this process whose dynamic symbol
/// `entry` is a function in an executable segment. The error says what is wrong.
pub fn check_library(path: &Path, entry: &str) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let elf = Elf::read(file, meta.len())?;
    let segments = elf.load_segments()?;
    let symbol = elf.dynamic_symbol(entry)?;
    let Some(symbol) = symbol else {
        return Err(format!("does not export `{entry}`: it is not a kiln plugin library"));
    };
    if !matches!(symbol.kind, STT_FUNC | STT_GNU_IFUNC) {
        return Err(format!("exports `{entry}` as data (ELF symbol type {}), not as a function", symbol.kind));
    }
    let executable =
        segments.iter().any(|s| s.executable && (s.address..s.address.saturating_add(s.size)).contains(&symbol.value));
    if !executable {
        return Err(format!("exports `{entry}` outside its executable code (at 0x{:x})", symbol.value));
    }
    Ok(())
}

struct Segment {
    address: u64,
    size: u64,
    executable: bool,
}

struct Symbol {
    kind: u8,
    value: u64,
}

/// Where a table lies in the file.
#[derive(Clone, Copy)]
struct Table {
    offset: u64,
    count: u64,
    entry_size: u64,
}

struct Elf {
    file: File,
    len: u64,
    wide: bool,
    little: bool,
    programs: Table,
    sections: Table,
}

impl Elf {
    fn read(file: File, len: u64) -> Result<Elf, String> {
        let mut elf = Elf {
            file,
            len,
            wide: cfg!(target_pointer_width = "64"),
            little: cfg!(target_endian = "little"),
            programs: Table { offset: 0, count: 0, entry_size: 0 },
            sections: Table { offset: 0, count: 0, entry_size: 0 },
        };
        let ident = elf
            .bytes(0, 16)
            .map_err(|_| format!("is not a shared library ({len} bytes, too short for an ELF header)"))?;
        if &ident[..4] != ELF_MAGIC {
            return Err("is not a shared library (no ELF header)".into());
        }
        if !matches!(ident[4], 1 | 2) {
            return Err(format!("has an unknown ELF class {}", ident[4]));
        }
        let (bits, ours) = (if ident[4] == 2 { 64 } else { 32 }, if elf.wide { 64 } else { 32 });
        if bits != ours {
            return Err(format!("is a {bits}-bit library (ELF class {}); this kiln is {ours}-bit", ident[4]));
        }
        let endian = |little| {
            if little {
                "little-endian"
            } else {
                "big-endian"
            }
        };
        if !matches!(ident[5], 1 | 2) || (ident[5] == 1) != elf.little {
            return Err(format!("is not {} (ELF data encoding {})", endian(elf.little), ident[5]));
        }
        let header = elf
            .bytes(0, if elf.wide { 64 } else { 52 })
            .map_err(|_| format!("is truncated: {len} bytes, less than its ELF header"))?;
        let kind = elf.half(&header, 16);
        if kind != ET_DYN {
            return Err(format!("is not a shared library (ELF type {kind})"));
        }
        let machine = elf.half(&header, 18);
        if MACHINE.is_some_and(|m| m != machine) {
            return Err(format!(
                "is built for another processor (ELF machine {machine}, this kiln runs on {})",
                std::env::consts::ARCH
            ));
        }
        let (ph, sh, sizes) = if elf.wide { (32, 40, 54) } else { (28, 32, 42) };
        elf.programs = Table {
            offset: elf.address(&header, ph),
            count: elf.half(&header, sizes + 2).into(),
            entry_size: elf.half(&header, sizes).into(),
        };
        elf.sections = Table {
            offset: elf.address(&header, sh),
            count: elf.half(&header, sizes + 6).into(),
            entry_size: elf.half(&header, sizes + 4).into(),
        };
        let (program_size, section_size) = if elf.wide { (56, 64) } else { (32, 40) };
        elf.check_table("program headers", elf.programs, program_size)?;
        if elf.sections.offset != 0 {
            elf.check_table("section headers", elf.sections, section_size)?;
        }
        Ok(elf)
    }

    fn check_table(&self, what: &str, table: Table, entry_size: u64) -> Result<(), String> {
        if table.count > 0 && table.entry_size != entry_size {
            return Err(format!("has malformed {what} ({} bytes each, expected {entry_size})", table.entry_size));
        }
        self.within(what, table.offset, table.count * table.entry_size)
    }

    /// Refuses a range past the end of the file: a truncated library.
    fn within(&self, what: &str, offset: u64, size: u64) -> Result<(), String> {
        match offset.checked_add(size) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(format!(
                "is truncated or corrupt: its {what} lie at bytes {offset}..{}, the file has {} (refused before loading)",
                offset as u128 + size as u128,
                self.len
            )),
        }
    }

    /// The loadable segments, each checked to lie inside the file.
    fn load_segments(&self) -> Result<Vec<Segment>, String> {
        let mut out = Vec::new();
        for i in 0..self.programs.count {
            let h = self.entry(self.programs, i)?;
            if self.word(&h, 0) != PT_LOAD {
                continue;
            }
            let (flags, offset, address, file_size, memory_size) = if self.wide {
                (
                    self.word(&h, 4),
                    self.address(&h, 8),
                    self.address(&h, 16),
                    self.address(&h, 32),
                    self.address(&h, 40),
                )
            } else {
                (
                    self.word(&h, 24),
                    self.address(&h, 4),
                    self.address(&h, 8),
                    self.address(&h, 16),
                    self.address(&h, 20),
                )
            };
            self.within(&format!("segment #{i}'s contents"), offset, file_size)?;
            out.push(Segment { address, size: memory_size, executable: flags & PF_X != 0 });
        }
        if out.is_empty() {
            return Err("is not a loadable library (no loadable segments)".into());
        }
        Ok(out)
    }

    /// The defined dynamic symbol `name`, from the `.dynsym` section; `None` when the
    /// library does not define it.
    fn dynamic_symbol(&self, name: &str) -> Result<Option<Symbol>, String> {
        if self.sections.offset == 0 {
            return Err("has no section headers, so kiln cannot check its entry point".into());
        }
        for i in 0..self.sections.count {
            let (kind, offset, size, link, entry_size) = self.section(i)?;
            if kind != SHT_DYNSYM {
                continue;
            }
            let (_, string_offset, string_size, _, _) = self.section(link.into())?;
            let strings = self.table_bytes("dynamic string table", string_offset, string_size)?;
            let symbols = self.table_bytes("dynamic symbol table", offset, size)?;
            let expected = if self.wide { 24 } else { 16 };
            if entry_size != expected {
                return Err(format!("has a malformed dynamic symbol table ({entry_size} bytes per symbol)"));
            }
            for s in symbols.chunks_exact(expected as usize) {
                let (name_at, info, defined_in, value) = if self.wide {
                    (self.word(s, 0), s[4], self.half(s, 6), self.address(s, 8))
                } else {
                    (self.word(s, 0), s[12], self.half(s, 14), self.address(s, 4))
                };
                let found = strings.get(name_at as usize..).and_then(|rest| rest.split(|&b| b == 0).next());
                if defined_in != 0 && found == Some(name.as_bytes()) {
                    return Ok(Some(Symbol { kind: info & 0xf, value }));
                }
            }
            return Ok(None);
        }
        Err("has no dynamic symbol table".into())
    }

    /// Section `i`: type, offset, size, link and entry size (its data checked to lie in the file).
    fn section(&self, i: u64) -> Result<(u32, u64, u64, u32, u64), String> {
        if i >= self.sections.count {
            return Err(format!("has a section header pointing to section #{i} of {}", self.sections.count));
        }
        let h = self.entry(self.sections, i)?;
        let kind = self.word(&h, 4);
        let fields = if self.wide {
            (kind, self.address(&h, 24), self.address(&h, 32), self.word(&h, 40), self.address(&h, 56))
        } else {
            (kind, self.address(&h, 16), self.address(&h, 20), self.word(&h, 24), self.address(&h, 36))
        };
        if kind != SHT_NOBITS {
            self.within(&format!("section #{i}'s contents"), fields.1, fields.2)?;
        }
        Ok(fields)
    }

    fn table_bytes(&self, what: &str, offset: u64, size: u64) -> Result<Vec<u8>, String> {
        if size > MAX_TABLE_BYTES {
            return Err(format!("has an implausibly large {what} ({size} bytes)"));
        }
        self.bytes(offset, size)
    }

    fn entry(&self, table: Table, i: u64) -> Result<Vec<u8>, String> {
        self.bytes(table.offset + i * table.entry_size, table.entry_size)
    }

    fn bytes(&self, offset: u64, size: u64) -> Result<Vec<u8>, String> {
        self.within("headers", offset, size)?;
        let mut out = vec![0; size as usize];
        self.file.read_exact_at(&mut out, offset).map_err(|e| format!("cannot be read: {e}"))?;
        Ok(out)
    }

    fn half(&self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        if self.little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    }

    fn word(&self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    }

    /// An address or offset: 8 bytes in a 64-bit file, 4 in a 32-bit one.
    fn address(&self, b: &[u8], at: usize) -> u64 {
        if !self.wide {
            return self.word(b, at).into();
        }
        let v: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
        if self.little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    }
}
