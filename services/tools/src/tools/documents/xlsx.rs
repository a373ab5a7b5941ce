//! XLSX: each worksheet with a non-blank row as `--- Sheet: NAME ---` and its non-blank
//! rows as tab-joined cells, values written as Python's `str()` writes what openpyxl reads
//! (`3`, `2.5`, `True`, `2024-01-02 00:00:00`, `#DIV/0!`); a blank line between sheets.

use std::io::Cursor;

use calamine::{Data, Reader as _, SheetType, Xlsx};

use super::{Error, Kind, Line};

/// Returns the workbook's lines, rows located as `sheet='NAME',row=N`.
pub(super) fn lines(bytes: &[u8]) -> Result<Vec<Line>, Error> {
    let open_error = |e: calamine::XlsxError| Error::Open {
        kind: Kind::Xlsx,
        reason: e.to_string(),
    };
    let mut workbook = Xlsx::new(Cursor::new(bytes)).map_err(open_error)?;
    let sheets: Vec<String> = workbook
        .sheets_metadata()
        .iter()
        .filter(|sheet| sheet.typ == SheetType::WorkSheet)
        .map(|sheet| sheet.name.clone())
        .collect();
    let mut lines = Vec::new();
    for name in sheets {
        let range = workbook.worksheet_range(&name).map_err(open_error)?;
        let Some((first_row, first_col)) = range.start() else {
            continue;
        };
        // openpyxl's rows start at column A: cells left of the used range are empty.
        let lead = "\t".repeat(usize::try_from(first_col).unwrap_or(0));
        let mut wrote_header = false;
        for (row_index, row) in (usize::try_from(first_row).unwrap_or(0) + 1..).zip(range.rows()) {
            let cells: Vec<String> = row.iter().map(cell_text).collect();
            let text = format!("{lead}{}", cells.join("\t"));
            if text.trim().is_empty() {
                continue;
            }
            if !wrote_header {
                if !lines.is_empty() {
                    lines.push(Line::plain(String::new()));
                }
                lines.push(Line::plain(format!("--- Sheet: {name} ---")));
                wrote_header = true;
            }
            let locator = format!(
                "sheet={},row={row_index}",
                nanobot_runtime::pyfmt::py_repr_str(&name)
            );
            lines.push(Line::located(text, locator));
        }
    }
    Ok(lines)
}

/// Returns a cell's value as Python's `str()` of openpyxl's value writes it.
fn cell_text(cell: &Data) -> String {
    match cell {
        Data::Empty => String::new(),
        Data::String(s) | Data::DateTimeIso(s) | Data::DurationIso(s) => s.clone(),
        Data::Int(i) => i.to_string(),
        Data::Float(f) => number_text(*f),
        Data::Bool(true) => "True".into(),
        Data::Bool(false) => "False".into(),
        Data::Error(e) => e.to_string(),
        Data::DateTime(dt) => date_text(dt),
    }
}

/// Writes an Excel number: whole numbers as integers (openpyxl reads `<v>3</v>` as `int`),
/// others as Python's `repr(float)` does.
fn number_text(value: f64) -> String {
    // 2^53: every whole f64 below it is an exact integer.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if value.fract() == 0.0 && value.abs() < EXACT {
        // Exact: the value is whole and within i64.
        return (value as i64).to_string();
    }
    python_float(value)
}

/// Returns Python's `repr()` of a float: the shortest round-trip digits, positional for
/// exponents from -4 to 15 (`0.0001`, `2.5`), else scientific with a signed two-digit
/// exponent (`1e+16`, `1.5e-05`).
fn python_float(value: f64) -> String {
    if !value.is_finite() {
        return if value.is_nan() {
            "nan"
        } else if value > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .into();
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let positional = value.to_string();
        if positional.contains('.') {
            return positional;
        }
        return format!("{positional}.0");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
}

/// Writes a date cell as Python writes openpyxl's value: a `datetime`
/// (`2024-01-02 03:04:05`), a `time` for a value under one day, or a `timedelta`
/// (`1 day, 2:00:00`) for a duration format; milliseconds as `.ffffff`.
fn date_text(dt: &calamine::ExcelDateTime) -> String {
    let value = dt.as_f64();
    if dt.is_duration() {
        return duration_text(value);
    }
    let (year, month, day, hour, minute, second, milli) = dt.to_ymd_hms_milli();
    let fraction = if milli == 0 {
        String::new()
    } else {
        format!(".{:06}", u32::from(milli) * 1000)
    };
    let time = format!("{hour:02}:{minute:02}:{second:02}{fraction}");
    if (0.0..1.0).contains(&value) {
        return time;
    }
    format!("{year:04}-{month:02}-{day:02} {time}")
}

/// Writes a duration in days as Python's `str(timedelta)`.
fn duration_text(days: f64) -> String {
    // Milliseconds, as openpyxl rounds; durations in a sheet are far within i64.
    let total_ms = (days * 86_400_000.0).round() as i64;
    let day_ms = 86_400_000;
    let whole_days = total_ms.div_euclid(day_ms);
    let rest = total_ms.rem_euclid(day_ms);
    let (hours, minutes) = (rest / 3_600_000, rest / 60_000 % 60);
    let (seconds, millis) = (rest / 1000 % 60, rest % 1000);
    let mut text = match whole_days {
        0 => String::new(),
        1 | -1 => format!("{whole_days} day, "),
        n => format!("{n} days, "),
    };
    text.push_str(&format!("{hours}:{minutes:02}:{seconds:02}"));
    if millis != 0 {
        text.push_str(&format!(".{:06}", millis * 1000));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_python_writes_them() {
        assert_eq!(number_text(3.0), "3");
        assert_eq!(number_text(-42.0), "-42");
        assert_eq!(number_text(2.5), "2.5");
        assert_eq!(number_text(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(number_text(0.0001), "0.0001");
        assert_eq!(number_text(0.000_015), "1.5e-05");
        assert_eq!(number_text(1e16), "1e+16");
        assert_eq!(number_text(1.5e300), "1.5e+300");
        assert_eq!(python_float(1e15), "1000000000000000.0");
    }

    #[test]
    fn durations_read_as_python_timedelta() {
        assert_eq!(duration_text(0.5), "12:00:00");
        assert_eq!(duration_text(1.25), "1 day, 6:00:00");
        assert_eq!(duration_text(3.0), "3 days, 0:00:00");
    }
}
