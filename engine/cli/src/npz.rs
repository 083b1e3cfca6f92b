//! Reading and writing `.npz` archives of host tensors.
//!
//! dtype mapping (numpy ↔ kiln): `<f4` f32, `<f8` f64, `<f2` f16, `i1`..`i8` i8..i64,
//! `u1`..`u8` u8..u64, `|b1` bool, `<U{n}` string (also read from `S{n}` as UTF-8). numpy has no bfloat16, so bf16 travels as `<u2` holding
//! the raw bits: bf16 outputs are written that way, and [`crate::inputs`] reinterprets a
//! `<u2` array given for a bf16 input.

use anyhow::{bail, Context};
use half::{bf16, f16};
use kiln::{DataType, HostTensor, TensorData, I2, I4, U2, U4};
use npyz::npz::{NpzArchive, NpzWriter};
use npyz::zip::write::FileOptions;
use npyz::zip::CompressionMethod;
use npyz::{AutoSerialize, DType, Deserialize, NpyFile, Order, TypeChar, WriterBuilder};
use crate::output_file;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Every array of an `.npz` file (compressed or not), in archive order.
pub fn read_npz(path: &Path) -> anyhow::Result<Vec<(String, HostTensor)>> {
    let archive = NpzArchive::open(path).with_context(|| format!("cannot open npz file `{}`", path.display()))?;
    read_archive(archive, &format!("`{}`", path.display()))
}

/// The magic bytes every `.npy` file starts with.
const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// Whether the file starts like a `.npy` array (not an `.npz` archive).
pub fn is_npy_file(path: &Path) -> bool {
    let mut magic = [0u8; 6];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == NPY_MAGIC
}

/// The array of a `.npy` file.
pub fn read_npy(path: &Path) -> anyhow::Result<HostTensor> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read npy file `{}`", path.display()))?;
    read_npy_bytes(&bytes).with_context(|| format!("cannot read npy file `{}`", path.display()))
}

/// [`read_npy`] of bytes in memory (also the fuzz target's entry).
pub fn read_npy_bytes(bytes: &[u8]) -> anyhow::Result<HostTensor> {
    check_npy_header(&bytes[..bytes.len().min(12 + MAX_HEADER_BYTES)])?;
    let file = NpyFile::new(bytes).map_err(|e| anyhow::anyhow!("its npy header is malformed ({e})"))?;
    read_array(file, Some(bytes.len() as u64))
}

/// [`read_npz`] of an archive in memory (the fuzz target's entry).
#[allow(dead_code)] // used by fuzz/fuzz_targets/npz_read.rs, which includes this file
pub fn read_npz_bytes(bytes: &[u8]) -> anyhow::Result<Vec<(String, HostTensor)>> {
    let archive = NpzArchive::new(std::io::Cursor::new(bytes)).context("cannot open the npz archive")?;
    read_archive(archive, "the archive")
}

/// Every array of `archive`; `label` names it in errors.
fn read_archive<R: Read + Seek>(mut archive: NpzArchive<R>, label: &str) -> anyhow::Result<Vec<(String, HostTensor)>> {
    let names: Vec<String> = archive.array_names().map(str::to_string).collect();
    let mut arrays = Vec::with_capacity(names.len());
    for name in names {
        let context = || format!("cannot read array `{name}` of {label}");
        // What the archive holds for the array bounds what its header may claim.
        let stored = archive.zip_archive().by_name(&npyz::npz::file_name_from_array_name(&name)).map(|e| e.size()).ok();
        check_header_shape(&mut archive, &name).with_context(context)?;
        // Read inside the borrow of the archive, so an error can look at the archive again.
        let tensor = match archive.by_name(&name).map(|file| file.map(|f| read_array(f, stored))) {
            Ok(Some(tensor)) => tensor.with_context(context)?,
            Ok(None) => bail!("{}: it vanished from the archive", context()),
            Err(error) => {
                // npyz rejects dtypes it cannot even parse (e.g. `|O`, pickled objects)
                // before showing the header: name the dtype from the raw header when that
                // is what failed, and the header otherwise.
                let error = match raw_descr(&mut archive, &name) {
                    Some(descr) if descr.parse::<npyz::TypeStr>().is_err() => {
                        anyhow::anyhow!("its dtype `{descr}` is not supported by kiln ({error})")
                    }
                    _ => anyhow::anyhow!("its npy header is malformed ({error})"),
                };
                return Err(error.context(context()));
            }
        };
        arrays.push((name, tensor));
    }
    Ok(arrays)
}

/// numpy's own limit on an npy header (`max_header_size`, numpy 1.24 on).
const MAX_HEADER_BYTES: usize = 10_000;
/// A plain array's header holds two brackets: the dict and the `shape` tuple (kiln reads no
/// structured dtypes, whose lists of tuples hold more).
const MAX_HEADER_BRACKETS: usize = 8;

/// [`check_npy_header`] of an archive's array.
fn check_header_shape<R: Read + Seek>(archive: &mut NpzArchive<R>, name: &str) -> anyhow::Result<()> {
    let Ok(entry) = archive.zip_archive().by_name(&npyz::npz::file_name_from_array_name(name)) else {
        return Ok(());
    };
    let mut head = Vec::new();
    entry.take((12 + MAX_HEADER_BYTES) as u64).read_to_end(&mut head)?;
    check_npy_header(&head)
}

/// Refuses a header that is too long or holds many brackets before npyz parses it: its
/// Python-literal parser backtracks exponentially in nesting depth (14 unclosed `{` take
/// over a minute). Every bracket counts, quoted or not: quotes and their escapes could hide
/// brackets from a scanner that the parser then sees. `head` is the start of an npy file.
fn check_npy_header(head: &[u8]) -> anyhow::Result<()> {
    // Magic (6 bytes), version (2), header length (u16 in version 1, u32 after).
    let (len, start) = match head.get(6) {
        Some(1) if head.len() >= 10 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        Some(2 | 3) if head.len() >= 12 => (u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize, 12),
        _ => return Ok(()), // not an npy preamble: npyz names what is wrong
    };
    if len > MAX_HEADER_BYTES {
        bail!("its npy header is {len} bytes long; numpy writes and reads at most {MAX_HEADER_BYTES}");
    }
    let text = &head[start.min(head.len())..(start + len).min(head.len())];
    let brackets = text.iter().filter(|b| matches!(b, b'{' | b'(' | b'[')).count();
    if brackets > MAX_HEADER_BRACKETS {
        bail!("its npy header holds {brackets} opening brackets; a plain array's holds 2, kiln reads at most {MAX_HEADER_BRACKETS}");
    }
    Ok(())
}

/// The `descr` entry of an array's npy header, read as plain text.
fn raw_descr<R: Read + Seek>(archive: &mut NpzArchive<R>, name: &str) -> Option<String> {
    let entry = archive.zip_archive().by_name(&npyz::npz::file_name_from_array_name(name)).ok()?;
    let mut head = Vec::new();
    entry.take(4096).read_to_end(&mut head).ok()?;
    let head = String::from_utf8_lossy(&head);
    let rest = &head[head.find("'descr':")? + "'descr':".len()..];
    let rest = rest.trim_start().strip_prefix('\'')?;
    Some(rest[..rest.find('\'')?].to_string())
}

/// One array; `stored` is how many bytes the archive holds for it (header included).
fn read_array<R: Read>(file: NpyFile<R>, stored: Option<u64>) -> anyhow::Result<HostTensor> {
    let DType::Plain(type_str) = file.dtype() else {
        bail!("it has a structured dtype (`{}`), which kiln does not support", file.dtype().descr());
    };
    let shape = file
        .shape()
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .context("its shape does not fit in memory")?;
    let count = kiln::limits::element_count(&shape).context("its element count overflows")?;
    // A header may claim any shape: refuse one the stored bytes cannot fill before
    // anything is allocated for it.
    let claimed = (count as u64).saturating_mul(type_str.size_field() as u64);
    if let Some(stored) = stored.filter(|&stored| claimed > stored) {
        bail!("its header declares {type_str}{shape:?} ({claimed} bytes) but the archive holds {stored} bytes for it");
    }
    let data = match (type_str.type_char(), type_str.size_field()) {
        (TypeChar::Float, 4) => TensorData::F32(elements(file, &shape)?),
        (TypeChar::Float, 8) => TensorData::F64(elements(file, &shape)?),
        (TypeChar::Float, 2) => TensorData::F16(elements::<f16, R>(file, &shape)?),
        (TypeChar::Int, 1) => TensorData::I8(elements(file, &shape)?),
        (TypeChar::Int, 2) => TensorData::I16(elements(file, &shape)?),
        (TypeChar::Int, 4) => TensorData::I32(elements(file, &shape)?),
        (TypeChar::Int, 8) => TensorData::I64(elements(file, &shape)?),
        (TypeChar::Uint, 1) => TensorData::U8(elements(file, &shape)?),
        (TypeChar::Uint, 2) => TensorData::U16(elements(file, &shape)?),
        (TypeChar::Uint, 4) => TensorData::U32(elements(file, &shape)?),
        (TypeChar::Uint, 8) => TensorData::U64(elements(file, &shape)?),
        (TypeChar::Bool, 1) => TensorData::Bool(elements(file, &shape)?),
        // numpy `<U` (UTF-32) or `S` (bytes, read as UTF-8) string arrays.
        (TypeChar::UnicodeStr | TypeChar::ByteStr, _) => TensorData::String(elements(file, &shape)?),
        (kind, _) => bail!("its dtype `{type_str}` ({}) is not supported by kiln", describe(kind)),
    };
    Ok(HostTensor::new(shape, data)?)
}

fn describe(kind: TypeChar) -> &'static str {
    match kind {
        TypeChar::Bool => "bool of unusual width",
        TypeChar::Int | TypeChar::Uint => "integer of unusual width",
        TypeChar::Float => "float of unsupported width",
        TypeChar::Complex => "complex",
        TypeChar::TimeDelta | TypeChar::DateTime => "date/time",
        TypeChar::ByteStr | TypeChar::UnicodeStr => "string",
        TypeChar::RawData => "raw bytes",
        _ => "unknown kind",
    }
}

/// The elements in row-major (C) order, whatever order the file stores.
fn elements<T: Deserialize + Clone, R: Read>(file: NpyFile<R>, shape: &[usize]) -> anyhow::Result<Vec<T>> {
    let order = file.order();
    let values: Vec<T> = file.into_vec()?;
    Ok(match order {
        Order::C => values,
        Order::Fortran => fortran_to_c(&values, shape),
    })
}

/// Reorders column-major elements into row-major order.
fn fortran_to_c<T: Clone>(values: &[T], shape: &[usize]) -> Vec<T> {
    // Column-major strides: the first axis varies fastest.
    let mut strides = Vec::with_capacity(shape.len());
    let mut stride = 1;
    for &d in shape {
        strides.push(stride);
        stride *= d;
    }
    let mut index = vec![0usize; shape.len()];
    let mut out = Vec::with_capacity(values.len());
    for _ in 0..values.len() {
        let offset: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.push(values[offset].clone());
        // Advance the row-major multi-index: the last axis varies fastest.
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    out
}

/// Writes the tensors to an uncompressed `.npz` file (as `np.savez` does), through
/// [`output_file::write_with`]; a failed write is one error, never a message on stderr.
pub fn write_npz<'t>(path: &Path, tensors: impl IntoIterator<Item = (&'t str, &'t HostTensor)>) -> anyhow::Result<()> {
    let context = || format!("cannot write npz file `{}`", path.display());
    output_file::write_with(path, |file| {
        let mut first = None;
        let mut npz = NpzWriter::new(FirstError::new(BufWriter::new(file), &mut first));
        let written = (|| -> anyhow::Result<()> {
            for (name, tensor) in tensors {
                write_tensor(&mut npz, name, tensor).with_context(|| format!("cannot write array `{name}`"))?;
            }
            npz.zip_writer().finish()?.flush()?;
            Ok(())
        })();
        // The zip writer retries finishing when dropped and prints its failure: after the
        // first error it only reaches `FirstError`, which discards it.
        drop(npz);
        match (written, first) {
            (Err(_), Some(io)) => Err(io.into()),
            (written, _) => written,
        }
    })
    .with_context(context)
}

/// A writer that fails once, with the first error of its inner writer, and after that
/// pretends to succeed without touching it (keeping a position for seeks).
struct FirstError<'e, W> {
    inner: W,
    error: &'e mut Option<std::io::Error>,
    failed: bool,
    position: u64,
    end: u64,
}

impl<'e, W: Write + Seek> FirstError<'e, W> {
    fn new(inner: W, error: &'e mut Option<std::io::Error>) -> Self {
        FirstError { inner, error, failed: false, position: 0, end: 0 }
    }

    fn fail<T>(&mut self, error: std::io::Error) -> std::io::Result<T> {
        let reported = std::io::Error::new(error.kind(), error.to_string());
        *self.error = Some(error);
        self.failed = true;
        Err(reported)
    }
}

impl<W: Write + Seek> Write for FirstError<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = if self.failed { Ok(buf.len()) } else { self.inner.write(buf) };
        match written {
            Ok(n) => {
                self.position += n as u64;
                self.end = self.end.max(self.position);
                Ok(n)
            }
            Err(e) => self.fail(e),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.failed {
            return Ok(());
        }
        match self.inner.flush() {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e),
        }
    }
}

impl<W: Write + Seek> Seek for FirstError<'_, W> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        if !self.failed {
            return match self.inner.seek(to) {
                Ok(at) => {
                    (self.position, self.end) = (at, self.end.max(at));
                    Ok(at)
                }
                Err(e) => self.fail(e),
            };
        }
        self.position = match to {
            SeekFrom::Start(at) => at,
            SeekFrom::Current(delta) => self.position.saturating_add_signed(delta),
            SeekFrom::End(delta) => self.end.saturating_add_signed(delta),
        };
        Ok(self.position)
    }
}

fn write_tensor<W: Write + Seek>(npz: &mut NpzWriter<W>, name: &str, tensor: &HostTensor) -> anyhow::Result<()> {
    let shape: Vec<u64> = tensor.shape().iter().map(|&d| d as u64).collect();
    match tensor.data() {
        TensorData::F32(v) => write_array(npz, name, &shape, v),
        TensorData::F16(v) => write_array(npz, name, &shape, v),
        TensorData::BF16(v) => write_array(npz, name, &shape, &v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>()),
        TensorData::F64(v) => write_array(npz, name, &shape, v),
        TensorData::I8(v) => write_array(npz, name, &shape, v),
        TensorData::I16(v) => write_array(npz, name, &shape, v),
        TensorData::I32(v) => write_array(npz, name, &shape, v),
        TensorData::I64(v) => write_array(npz, name, &shape, v),
        TensorData::U8(v) => write_array(npz, name, &shape, v),
        TensorData::U16(v) => write_array(npz, name, &shape, v),
        TensorData::U32(v) => write_array(npz, name, &shape, v),
        TensorData::U64(v) => write_array(npz, name, &shape, v),
        TensorData::Bool(v) => write_array(npz, name, &shape, v),
        // numpy has no narrow types: float codes as `u1` raw bits, 4- and 2-bit integers one
        // value per byte (`i1` sign-correct, `u1`), as the ONNX conformance harness reads them.
        TensorData::I4(v) => write_array(npz, name, &shape, &v.iter().map(|x| x.0).collect::<Vec<i8>>()),
        TensorData::I2(v) => write_array(npz, name, &shape, &v.iter().map(|x| x.0).collect::<Vec<i8>>()),
        TensorData::U4(v) => write_array(npz, name, &shape, &v.iter().map(|x| x.0).collect::<Vec<u8>>()),
        TensorData::U2(v) => write_array(npz, name, &shape, &v.iter().map(|x| x.0).collect::<Vec<u8>>()),
        TensorData::String(v) => write_strings(npz, name, &shape, v),
        other => write_array(npz, name, &shape, &other.to_le_bytes()),
    }
}

/// Strings as numpy `<U{n}` (UTF-32, `n` the longest string's char count, at least 1).
fn write_strings<W: Write + Seek>(
    npz: &mut NpzWriter<W>,
    name: &str,
    shape: &[u64],
    values: &[String],
) -> anyhow::Result<()> {
    let width = values.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(1);
    let type_str: npyz::TypeStr = format!("<U{width}").parse().context("numpy string dtype")?;
    let options = FileOptions::default().compression_method(CompressionMethod::Stored);
    let mut writer = npz.array::<str>(name, options)?.dtype(DType::new_scalar(type_str)).shape(shape).begin_nd()?;
    for s in values {
        writer.push(s)?;
    }
    writer.finish()?;
    Ok(())
}

fn write_array<T: AutoSerialize + Copy, W: Write + Seek>(
    npz: &mut NpzWriter<W>,
    name: &str,
    shape: &[u64],
    values: &[T],
) -> anyhow::Result<()> {
    // Entries of 4 GiB and more need zip64 records (the margin covers the npy header).
    let large = std::mem::size_of_val(values) as u64 >= u64::from(u32::MAX) - (1 << 20);
    let options = FileOptions::default().compression_method(CompressionMethod::Stored).large_file(large);
    let mut writer = npz.array::<T>(name, options)?.default_dtype().shape(shape).begin_nd()?;
    writer.extend(values.iter().copied())?;
    writer.finish()?;
    Ok(())
}

/// Reinterprets a `<u2` array as the raw bits of bf16 values (numpy has no bfloat16).
pub fn reinterpret_u16_as_bf16(tensor: HostTensor) -> anyhow::Result<HostTensor> {
    let shape = tensor.shape().to_vec();
    let TensorData::U16(bits) = tensor.into_data() else {
        bail!("only a u16 array can hold bf16 bits");
    };
    Ok(HostTensor::new(shape, TensorData::BF16(bits.into_iter().map(bf16::from_bits).collect()))?)
}

/// Reinterprets the numpy container of a narrow-typed input: `u1` raw bits for float8,
/// e8m0 and float4 (code in the low nibble), one value per byte (`i1` or `u1`) for the 4-
/// and 2-bit integers.
pub fn reinterpret_narrow(tensor: HostTensor, dtype: DataType) -> anyhow::Result<HostTensor> {
    let shape = tensor.shape().to_vec();
    let actual = tensor.dtype();
    let data = if dtype.is_narrow_float() {
        let TensorData::U8(bits) = tensor.into_data() else {
            bail!("a {dtype} array must be stored as u1 raw bits, not {actual}");
        };
        TensorData::from_le_bytes(dtype, &bits).with_context(|| format!("a {dtype} code has bits above its width"))?
    } else {
        let values = match tensor.data() {
            TensorData::I8(_) | TensorData::U8(_) => tensor.to_i64_vec().unwrap_or_default(),
            _ => bail!("a {dtype} array must be stored one value per byte (i1 or u1), not {actual}"),
        };
        let narrow = HostTensor::zeros(dtype, vec![]);
        let (min, max) = match narrow.data() {
            TensorData::I4(_) => (I4::MIN, I4::MAX),
            TensorData::U4(_) => (U4::MIN, U4::MAX),
            TensorData::I2(_) => (I2::MIN, I2::MAX),
            TensorData::U2(_) => (U2::MIN, U2::MAX),
            _ => bail!("{dtype} is not a narrow type"),
        };
        if let Some(v) = values.iter().find(|v| !(min..=max).contains(*v)) {
            bail!("value {v} is outside the range of {dtype} [{min}, {max}]");
        }
        // In range, the low bits are the element's code.
        let codes: Vec<u8> = values.iter().map(|&v| (v as u8) & ((1 << dtype.packed_bits().unwrap_or(8)) - 1)).collect();
        TensorData::from_le_bytes(dtype, &codes).context("narrow integer codes")?
    };
    Ok(HostTensor::new(shape, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive holding `x.npy` with this header (version 1) and 16 zero bytes of data.
    fn npz_with_header(header: &str) -> Vec<u8> {
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
        npy.extend_from_slice(header.as_bytes());
        npy.extend_from_slice(&[0; 16]);
        let mut zip = npyz::zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = FileOptions::default().compression_method(CompressionMethod::Stored);
        zip.start_file("x.npy", options).unwrap();
        zip.write_all(&npy).unwrap();
        zip.finish().unwrap().into_inner()
    }

    fn header(shape: &str) -> String {
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}\n")
    }

    #[test]
    fn headers_npyz_would_parse_for_minutes_are_refused() {
        let read = |h: &str| read_npz_bytes(&npz_with_header(h)).map(|a| a.len()).map_err(|e| format!("{e:#}"));
        assert_eq!(read(&header("(2, 2)")), Ok(1));
        let e = read(&header(&"{".repeat(14))).unwrap_err();
        assert!(e.contains("holds 15 opening brackets"), "{e}");
        // Brackets behind an escaped quote count too (a fuzz input the parser took 10 s on).
        let escaped = format!("{{'descr': '<f4', 'for': 'x\\\\\\'<f4':{}(4,), }}\n", "{".repeat(30));
        assert!(read(&escaped).unwrap_err().contains("opening brackets"));
        let e = read(&header(&format!("(2, 2){}", " ".repeat(MAX_HEADER_BYTES)))).unwrap_err();
        assert!(e.contains("numpy writes and reads at most 10000"), "{e}");
    }

    #[test]
    fn fortran_order_becomes_row_major() {
        // [[1, 2, 3], [4, 5, 6]] stored column-major.
        assert_eq!(fortran_to_c(&[1, 4, 2, 5, 3, 6], &[2, 3]), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(fortran_to_c::<i32>(&[], &[0, 3]), Vec::<i32>::new());
        assert_eq!(fortran_to_c(&[7], &[]), vec![7]);
    }
}
