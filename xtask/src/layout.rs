//! `cargo xtask layout [--check]`: the measures of the code's shape that the architecture holds
//! itself to (docs/architecture.md, "Layout rules"), read from the sources with `syn`:
//!
//! - the largest source files, counted without their tests (`#[cfg(test)]` items), and those
//!   over [`MAX_FILE_LINES`] (tables of text, [`TABLES`], aside);
//! - the functions over [`LONG_FN_LINES`] lines (tests aside);
//! - module cycles: two sibling modules (children of one parent) whose code, outside tests,
//!   each refers to the other through `crate::`, `super::`, `self::` or a child's name — a
//!   strongly connected component of more than one sibling. [`ALLOWED_EDGES`] lists the
//!   references left out (clap's `cli.rs` → the command modules).
//!
//! With `--check` it exits 1 when a file is over the limit or a cycle exists; the function
//! count is reported, not enforced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use syn::spanned::Spanned as _;
use syn::visit::Visit;

/// No source file is longer, tests and [`TABLES`] aside.
pub(crate) const MAX_FILE_LINES: usize = 1_200;
/// Functions longer than this are listed.
pub(crate) const LONG_FN_LINES: usize = 150;
/// Files that are tables of text (messages by case), exempt from [`MAX_FILE_LINES`].
const TABLES: &[&str] = &["decode/problem.rs"];
/// References left out of the cycle check: (crate directory, from module, to module), both
/// children of the crate root. clap's `cli.rs` names each command's arguments, and the commands
/// read the global options from it.
const ALLOWED_EDGES: &[(&str, &str, &str)] = &[("cli", "cli", "commands")];

/// One source file's measures.
#[derive(Debug)]
struct FileFacts {
    /// Relative to the workspace root.
    path: String,
    /// Lines outside `#[cfg(test)]` items.
    lines: usize,
    /// Functions outside tests: (line, name, lines).
    fns: Vec<(usize, String, usize)>,
    /// Modules this file's code refers to, outside tests: (module path, line).
    refs: Vec<(Vec<String>, usize)>,
}

/// What the layout measured.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    files: Vec<FileFacts>,
    /// Each cycle: its parent module (named with its crate), its members, one sample reference
    /// per member.
    cycles: Vec<(String, Vec<String>, Vec<String>)>,
}

/// `cargo xtask layout`.
pub(crate) fn run(root: &Path, args: &[String]) -> ExitCode {
    let check = args.iter().any(|a| a == "--check");
    let layout = match measure(root) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("xtask layout: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", layout.report());
    if check && (!layout.oversized().is_empty() || !layout.cycles.is_empty()) {
        eprintln!(
            "xtask layout: the layout rules are broken (a file over {MAX_FILE_LINES} lines or a module cycle); see docs/architecture.md"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Measures every crate of the workspace (directories with `src/lib.rs` or `src/main.rs`).
pub(crate) fn measure(root: &Path) -> Result<Layout, String> {
    let mut layout = Layout::default();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| format!("cannot read {}: {e}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src/lib.rs").exists() || p.join("src/main.rs").exists())
        .collect();
    crates.sort();
    for dir in crates {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let src = dir.join("src");
        let mut modules: BTreeMap<Vec<String>, FileFacts> = BTreeMap::new();
        for file in rust_files(&src) {
            let Some(module) = module_of(&src, &file) else {
                continue;
            };
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let rel = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            let facts = facts_of(&rel, &module, &text)?;
            modules.insert(module, facts);
        }
        let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
        let allowed: Vec<(&str, &str)> = ALLOWED_EDGES
            .iter()
            .filter(|(c, _, _)| *c == name)
            .map(|(_, a, b)| (*a, *b))
            .collect();
        for (parent, members, edges) in cycles_of(&modules, &known, &allowed) {
            let parent = if parent.is_empty() {
                format!("{name} (crate root)")
            } else {
                format!("{name}::{}", parent.join("::"))
            };
            layout.cycles.push((parent, members, edges));
        }
        layout.files.extend(modules.into_values());
    }
    Ok(layout)
}

impl Layout {
    /// Files over [`MAX_FILE_LINES`], tables aside.
    fn oversized(&self) -> Vec<&FileFacts> {
        let mut over: Vec<&FileFacts> = self
            .files
            .iter()
            .filter(|f| f.lines > MAX_FILE_LINES && !TABLES.iter().any(|t| f.path.ends_with(t)))
            .collect();
        over.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.path.cmp(&b.path)));
        over
    }

    /// The report, as text.
    pub(crate) fn report(&self) -> String {
        let mut out = String::new();
        let total: usize = self.files.iter().map(|f| f.lines).sum();
        out += &format!(
            "layout: {} source files, {total} lines outside tests\n",
            self.files.len()
        );
        let mut by_size: Vec<&FileFacts> = self.files.iter().collect();
        by_size.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.path.cmp(&b.path)));
        out += "largest files (lines outside tests):\n";
        for f in by_size.iter().take(10) {
            let mark = if TABLES.iter().any(|t| f.path.ends_with(t)) {
                " (table of text)"
            } else {
                ""
            };
            out += &format!("  {:>6}  {}{mark}\n", f.lines, f.path);
        }
        let over = self.oversized();
        out += &format!("files over {MAX_FILE_LINES} lines: {}\n", over.len());
        for f in over {
            out += &format!("  {:>6}  {}\n", f.lines, f.path);
        }
        let mut long: Vec<(usize, String)> = self
            .files
            .iter()
            .flat_map(|f| {
                f.fns
                    .iter()
                    .filter(|(_, _, n)| *n > LONG_FN_LINES)
                    .map(move |(line, name, n)| (*n, format!("{}:{line} {name}", f.path)))
            })
            .collect();
        long.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        out += &format!("functions over {LONG_FN_LINES} lines: {}\n", long.len());
        for (n, at) in &long {
            out += &format!("  {n:>6}  {at}\n");
        }
        out += &format!("module cycles: {}\n", self.cycles.len());
        for (parent, members, edges) in &self.cycles {
            out += &format!("  in {parent}: {}\n", members.join(" ↔ "));
            for e in edges {
                out += &format!("      {e}\n");
            }
        }
        out
    }
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The module a file is: `src/lib.rs` → `[]`, `src/a/b.rs` and `src/a/b/mod.rs` → `[a, b]`.
/// `main.rs` beside a `lib.rs`, and files under `src/bin/`, are not modules of the library.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    match last.as_str() {
        "lib.rs" if parts.is_empty() => Some(parts),
        "main.rs" if parts.is_empty() => (!src.join("lib.rs").exists()).then_some(parts),
        "mod.rs" => Some(parts),
        _ => {
            parts.push(last.trim_end_matches(".rs").to_string());
            Some(parts)
        }
    }
}

/// Whether an item's attributes make it test-only (`#[cfg(test)]`, `#[test]`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if a.path().is_ident("cfg") {
            let text = a.meta.require_list().map(|l| l.tokens.to_string());
            return text.is_ok_and(|t| t.trim() == "test");
        }
        false
    })
}

/// Reads one file: its lines outside tests, its functions, its references to modules.
fn facts_of(rel: &str, module: &[String], text: &str) -> Result<FileFacts, String> {
    let file = syn::parse_file(text).map_err(|e| {
        let at = e.span().start();
        format!("{rel}:{}:{}: cannot parse: {e}", at.line, at.column + 1)
    })?;
    let mut v = Visitor {
        module: module.to_vec(),
        inline: Vec::new(),
        fns: Vec::new(),
        refs: Vec::new(),
        test_lines: 0,
    };
    v.visit_file(&file);
    let lines = text.lines().count().saturating_sub(v.test_lines);
    Ok(FileFacts {
        path: rel.to_string(),
        lines,
        fns: v.fns,
        refs: v.refs,
    })
}

/// Walks a file, skipping test items.
struct Visitor {
    /// The file's module.
    module: Vec<String>,
    /// Inline `mod x { … }` blocks entered.
    inline: Vec<String>,
    fns: Vec<(usize, String, usize)>,
    refs: Vec<(Vec<String>, usize)>,
    test_lines: usize,
}

impl Visitor {
    /// The module the code being visited is in.
    fn here(&self) -> Vec<String> {
        let mut m = self.module.clone();
        m.extend(self.inline.iter().cloned());
        m
    }

    /// Records a path's module reference, resolved from where it is written.
    fn path(&mut self, segments: &[String], line: usize) {
        let Some(first) = segments.first() else {
            return;
        };
        let here = self.here();
        let base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => {
                let mut b = here.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    b.pop();
                    rest = &rest[1..];
                }
                let mut target = b;
                target.extend(rest.iter().cloned());
                self.refs.push((target, line));
                return;
            }
            // A name in this module's scope: maybe a child module (checked against the known
            // modules later).
            _ => {
                let mut target = here.clone();
                target.extend(segments.iter().cloned());
                self.refs.push((target, line));
                return;
            }
        };
        let mut target = base;
        target.extend(segments[1..].iter().cloned());
        self.refs.push((target, line));
    }

    fn skip(&mut self, attrs: &[syn::Attribute], span: proc_macro2::Span) -> bool {
        if is_test(attrs) {
            // Attributes first: the item's span starts after them.
            let start = attrs
                .iter()
                .map(|a| a.span().start().line)
                .min()
                .unwrap_or(span.start().line);
            self.test_lines += span.end().line + 1 - start;
            return true;
        }
        false
    }
}

/// The segments of a use tree, flattened.
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut v = prefix.clone();
            if n.ident != "self" {
                v.push(n.ident.to_string());
            }
            out.push(v);
        }
        syn::UseTree::Rename(r) => {
            let mut v = prefix.clone();
            if r.ident != "self" {
                v.push(r.ident.to_string());
            }
            out.push(v);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Visitor {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            syn::Item::Type(t) => &t.attrs,
            _ => &[],
        };
        if self.skip(attrs, item.span()) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.inline.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.inline.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.span().start().line;
        let mut paths = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut paths);
        for p in paths {
            self.path(&p, line);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.path(&segments, p.span().start().line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let (start, end) = (f.span().start().line, f.span().end().line);
        self.fns
            .push((start, f.sig.ident.to_string(), end + 1 - start));
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if self.skip(&f.attrs, f.span()) {
            return;
        }
        let (start, end) = (f.span().start().line, f.span().end().line);
        self.fns
            .push((start, f.sig.ident.to_string(), end + 1 - start));
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() {
            let (start, end) = (f.span().start().line, f.span().end().line);
            self.fns
                .push((start, f.sig.ident.to_string(), end + 1 - start));
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The module a reference lands in: the longest known prefix of `target`.
fn resolve<'a>(target: &[String], known: &'a BTreeSet<Vec<String>>) -> Option<&'a Vec<String>> {
    (1..=target.len())
        .rev()
        .find_map(|n| known.get(&target[..n]))
}

/// Cycles among siblings: (parent, members, one edge per member with where it is written).
/// `allowed` edges between children of the crate root are left out.
fn cycles_of(
    modules: &BTreeMap<Vec<String>, FileFacts>,
    known: &BTreeSet<Vec<String>>,
    allowed: &[(&str, &str)],
) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
    // parent → child → child → a sample "file:line".
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>> =
        BTreeMap::new();
    for (from, facts) in modules {
        for (target, line) in &facts.refs {
            let Some(to) = resolve(target, known) else {
                continue;
            };
            // The common ancestor, and the two children of it on each side.
            let common = from
                .iter()
                .zip(to.iter())
                .take_while(|(a, b)| a == b)
                .count();
            if common >= from.len() || common >= to.len() {
                continue; // an ancestor or a descendant: not siblings
            }
            let parent = from[..common].to_vec();
            let (a, b) = (from[common].clone(), to[common].clone());
            if parent.is_empty() && allowed.contains(&(a.as_str(), b.as_str())) {
                continue;
            }
            graphs
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| {
                    format!(
                        "{} → {} at {}:{line}",
                        from.join("::"),
                        to.join("::"),
                        facts.path
                    )
                });
        }
    }
    let mut out = Vec::new();
    for (parent, graph) in graphs {
        for scc in strongly_connected(&graph) {
            if scc.len() < 2 {
                continue;
            }
            let members: BTreeSet<&String> = scc.iter().collect();
            let edges: Vec<String> = scc
                .iter()
                .filter_map(|a| {
                    graph.get(a).and_then(|out| {
                        out.iter()
                            .find(|(b, _)| members.contains(b))
                            .map(|(_, at)| at.clone())
                    })
                })
                .collect();
            out.push((parent.clone(), scc, edges));
        }
    }
    out
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(edges) = s.graph.get(v) {
            for w in edges.keys() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            scc.sort();
            s.out.push(scc);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(files: &[(&str, &str)]) -> (BTreeMap<Vec<String>, FileFacts>, BTreeSet<Vec<String>>) {
        let mut modules = BTreeMap::new();
        for (m, text) in files {
            let path: Vec<String> = if m.is_empty() {
                vec![]
            } else {
                m.split("::").map(str::to_string).collect()
            };
            modules.insert(path.clone(), facts_of(m, &path, text).unwrap());
        }
        let known = modules.keys().cloned().collect();
        (modules, known)
    }

    #[test]
    fn siblings_that_refer_to_each_other_are_a_cycle_and_tests_do_not_count() {
        let (m, k) = module(&[
            ("", "mod a; mod b; mod c;"),
            ("a", "use crate::b::X; fn f() {}"),
            ("b", "fn g() { super::a::f(); }"),
            (
                "c",
                "use crate::a::f; #[cfg(test)] mod tests { use crate::b::X; }",
            ),
        ]);
        let cycles = cycles_of(&m, &k, &[]);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].1, ["a", "b"]);
        // c → a only (its test's reference to b is not counted): no cycle with c.
    }

    #[test]
    fn nested_modules_are_compared_under_their_common_parent() {
        let (m, k) = module(&[
            ("", "mod x; mod y;"),
            ("x", "mod p; mod q;"),
            ("x::p", "use super::q::T;"),
            ("x::q", "use crate::x::p::U;"),
            ("y", "use crate::x::p::U;"),
        ]);
        let cycles = cycles_of(&m, &k, &[]);
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].0, ["x"]);
        assert_eq!(cycles[0].1, ["p", "q"]);
    }

    /// The rules hold for the workspace itself: `cargo xtask test` fails when a change breaks them.
    #[test]
    fn the_workspace_keeps_the_layout_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let layout = measure(&root).unwrap();
        let report = layout.report();
        assert!(layout.files.len() > 100, "{report}");
        assert!(layout.oversized().is_empty(), "{report}");
        assert!(layout.cycles.is_empty(), "{report}");
    }

    #[test]
    fn lines_and_functions_leave_tests_out() {
        let text = "fn long() {\n    let a = 1;\n    let b = 2;\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
        let facts = facts_of("f.rs", &[], text).unwrap();
        assert_eq!(facts.lines, 5);
        assert_eq!(facts.fns, vec![(1, "long".to_string(), 4)]);
    }
}
