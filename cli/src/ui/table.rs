//! Plain-text tables (`ps`): columns padded to their widest cell, two spaces apart.

/// Columns padded to their widest cell, two spaces apart, trailing blanks trimmed.
pub(crate) fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let joined = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        format!("{}\n", joined.trim_end())
    };
    let mut out = line(&header.map(String::from));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_padded_to_the_widest_cell_and_trailing_blanks_trimmed() {
        let text = super::table(["A", "LONGER"], &[["wide cell".into(), "x".into()]]);
        assert_eq!(text, "A          LONGER\nwide cell  x\n");
    }
}
