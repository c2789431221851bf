//! The module layout of `src/`, checked from its source with `syn`:
//!
//! 1. Layers: a top-level module imports only from its own layer or lower ones ([`LAYERS`]),
//!    and the peers of an [`ISOLATED`] parent (the controllers) never import one another.
//! 2. No cycles among the children of any one module.
//!
//! An import is a `use` tree or any path starting with `crate::`, `super::` or `self::` (in
//! macro calls too), resolved to the longest known module it names. Items under `#[cfg(test)]`
//! and test-module files are skipped: tests may take their helpers from anywhere.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Meta, Token};

/// Top-level module → layer. Edit this table when the layout changes.
const LAYERS: &[(u32, &[&str])] = &[
    (0, &["crd", "slurm", "tls", "telemetry", "error_chain"]),
    (1, &["metrics", "http", "leader"]),
    // Slurm state: the index, the pollers, the registry.
    (2, &["state"]),
    (3, &["controller"]),
    (4, &["run", "cli"]),
];

/// Parent → its shared children. Any other two children of the parent (the controllers) are
/// peers and must not import each other; the parent itself is shared too.
const ISOLATED: &[(&str, &[&str])] = &[("controller", &["kit", "context", "cached_writes"])];

type Layers<'a> = &'a [(u32, &'a [&'a str])];
type Isolated<'a> = &'a [(&'a str, &'a [&'a str])];
type Module = Vec<String>;

/// `file` (relative to `src/`) names `text` at `line`, which lies in module `to`.
#[derive(Debug, Clone)]
struct Import {
    file: String,
    line: usize,
    from: Module,
    to: Module,
    text: String,
}

#[derive(Debug)]
enum Violation {
    Unknown(String),
    Upward(Import, u32, u32),
    Peer(Import),
    Cycle {
        parent: String,
        members: Vec<String>,
        cycle: Vec<String>,
        examples: Vec<Import>,
    },
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

impl fmt::Display for Import {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "src/{}:{}: `{}`", self.file, self.line, self.text)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Self::Unknown(top) => write!(f, "`{top}` is in no layer: add it to LAYERS"),
            Self::Upward(i, from, to) => write!(
                f,
                "{i}: upward import, `{}` (layer {from}) uses `{}` (layer {to})",
                name(&i.from),
                name(&i.to)
            ),
            Self::Peer(i) => write!(
                f,
                "{i}: `{}` uses its peer `{}`",
                name(&i.from),
                name(&i.to)
            ),
            Self::Cycle {
                parent,
                members,
                cycle,
                examples,
            } => {
                let (path, members) = (cycle.join(" -> "), members.join(", "));
                write!(
                    f,
                    "cycle among the children of `{parent}`: {path} ({members})"
                )?;
                for (w, i) in cycle.windows(2).zip(examples) {
                    write!(f, "\n    {} -> {}: {i}", w[0], w[1])?;
                }
                Ok(())
            }
        }
    }
}

/// A `mod name;` declaration, found `inline` deep in inline modules of its file.
struct Decl {
    inline: Vec<String>,
    name: String,
    path: Option<String>,
    test: bool,
}

/// One file's walk: the paths it names (made absolute) and the files it declares.
#[derive(Default)]
struct Scan {
    module: Module,
    inline: Vec<String>,
    in_test: usize,
    uses: Vec<(Module, usize, String)>,
    decls: Vec<Decl>,
}

impl Scan {
    fn record(&mut self, segs: &[String], line: usize) {
        if self.in_test > 0 || segs.len() < 2 {
            return;
        }
        let mut abs: Module = self.module.iter().chain(&self.inline).cloned().collect();
        let mut rest = &segs[1..];
        match segs[0].as_str() {
            "crate" => abs.clear(),
            "self" => {}
            "super" => {
                rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    if abs.pop().is_none() {
                        return;
                    }
                    rest = &rest[1..];
                }
            }
            _ => return,
        }
        abs.extend(rest.iter().filter(|s| *s != "self" && *s != "*").cloned());
        self.uses.push((abs, line, segs.join("::")));
    }

    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        let mut leaf = |scan: &mut Self, last: String, span: proc_macro2::Span| {
            prefix.push(last);
            scan.record(prefix, span.start().line);
            prefix.pop();
        };
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => leaf(self, n.ident.to_string(), n.ident.span()),
            syn::UseTree::Rename(r) => leaf(self, r.ident.to_string(), r.ident.span()),
            syn::UseTree::Glob(g) => leaf(self, "*".into(), g.star_token.span),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(t, prefix)),
        }
    }

    /// Macro arguments are unparsed tokens: find `crate::a::b` runs in them.
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id)
                    if matches!(id.to_string().as_str(), "crate" | "super" | "self") =>
                {
                    let (mut segs, mut line) = (vec![id.to_string()], id.span().start().line);
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(n)),
                    ) = (tts.get(i + 1), tts.get(i + 2), tts.get(i + 3))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(n.to_string());
                        line = n.span().start().line;
                        i += 3;
                    }
                    self.record(&segs, line);
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// `#[cfg(test)]` or `#[cfg(all(test, ..))]`: compiled only into tests.
fn is_test(attrs: &[Attribute]) -> bool {
    fn test_only(meta: &Meta) -> bool {
        match meta {
            Meta::Path(p) => p.is_ident("test"),
            Meta::List(l) if l.path.is_ident("all") => l
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .is_ok_and(|all| all.iter().any(test_only)),
            _ => false,
        }
    }
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.parse_args().is_ok_and(|m| test_only(&m)))
}

fn item_attrs(item: &syn::Item) -> &[Attribute] {
    use syn::Item as I;
    match item {
        I::Const(syn::ItemConst { attrs, .. })
        | I::Enum(syn::ItemEnum { attrs, .. })
        | I::ExternCrate(syn::ItemExternCrate { attrs, .. })
        | I::Fn(syn::ItemFn { attrs, .. })
        | I::ForeignMod(syn::ItemForeignMod { attrs, .. })
        | I::Impl(syn::ItemImpl { attrs, .. })
        | I::Macro(syn::ItemMacro { attrs, .. })
        | I::Mod(syn::ItemMod { attrs, .. })
        | I::Static(syn::ItemStatic { attrs, .. })
        | I::Struct(syn::ItemStruct { attrs, .. })
        | I::Trait(syn::ItemTrait { attrs, .. })
        | I::TraitAlias(syn::ItemTraitAlias { attrs, .. })
        | I::Type(syn::ItemType { attrs, .. })
        | I::Union(syn::ItemUnion { attrs, .. })
        | I::Use(syn::ItemUse { attrs, .. }) => attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Scan {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = usize::from(is_test(item_attrs(item)));
        self.in_test += test;
        visit::visit_item(self, item);
        self.in_test -= test;
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(c) => &c.attrs,
            syn::ImplItem::Fn(f) => &f.attrs,
            syn::ImplItem::Type(t) => &t.attrs,
            syn::ImplItem::Macro(m) => &m.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        let test = usize::from(is_test(attrs));
        self.in_test += test;
        visit::visit_impl_item(self, item);
        self.in_test -= test;
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let path = m.attrs.iter().find_map(|a| match &a.meta {
            Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        });
        if m.content.is_none() {
            let name = m.ident.to_string();
            let (inline, test) = (self.inline.clone(), self.in_test > 0);
            self.decls.push(Decl {
                inline,
                name,
                path,
                test,
            });
            return;
        }
        self.inline.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.inline.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, &mut vec![]);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p.segments.last().map_or(0, |s| s.ident.span().start().line);
            self.record(&segs, line);
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        visit::visit_macro(self, m);
    }
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are crate roots (None).
fn module_of(file: &str) -> Option<Module> {
    let stem = file.strip_suffix(".rs")?;
    let mut module: Module = stem.split('/').map(String::from).collect();
    match module.last().map(String::as_str) {
        Some("lib" | "main") if module.len() == 1 => return None,
        Some("mod") => drop(module.pop()),
        _ => {}
    }
    Some(module)
}

/// The file that `decl` in `file` loads, as rustc finds it (`#[path]` included).
fn child_file(file: &str, decl: &Decl, files: &BTreeMap<String, String>) -> Option<String> {
    let (dir, base) = file.rsplit_once('/').unwrap_or(("", file));
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    // A #[path] outside inline modules is relative to the file's directory; all else to the
    // module's own directory, which a non-mod.rs file names after itself.
    if decl.path.is_none() || !decl.inline.is_empty() {
        if !matches!(base, "mod.rs" | "lib.rs" | "main.rs") {
            parts.push(base.trim_end_matches(".rs"));
        }
        parts.extend(decl.inline.iter().map(String::as_str));
    }
    let (flat, nested) = (format!("{}.rs", decl.name), format!("{}/mod.rs", decl.name));
    let candidates = match &decl.path {
        Some(path) => vec![path.as_str()],
        None => vec![flat.as_str(), nested.as_str()],
    };
    let mut found = candidates
        .into_iter()
        .map(|c| [&parts[..], &[c]].concat().join("/"));
    found.find(|c| files.contains_key(c))
}

/// Every import between two different modules of the non-test files; and those modules.
fn imports(files: &BTreeMap<String, String>) -> (BTreeSet<Module>, Vec<Import>) {
    let mut scans = BTreeMap::new();
    for (file, source) in files {
        let parsed = syn::parse_file(source).unwrap_or_else(|e| panic!("src/{file}: {e}"));
        let module = module_of(file).unwrap_or_default();
        let mut scan = Scan {
            module,
            ..Scan::default()
        };
        scan.visit_file(&parsed);
        scans.insert(file.clone(), scan);
    }
    // Test files: declared under #[cfg(test)], or declared by a test file.
    let mut tests = BTreeSet::new();
    loop {
        let before = tests.len();
        for (file, scan) in &scans {
            let in_test = tests.contains(file);
            for decl in scan.decls.iter().filter(|d| d.test || in_test) {
                tests.extend(child_file(file, decl, files));
            }
        }
        if tests.len() == before {
            break;
        }
    }
    let checked = |file: &String| !tests.contains(file) && module_of(file).is_some();
    let known: BTreeSet<Module> = scans
        .iter()
        .filter(|(f, _)| checked(f))
        .map(|(_, s)| s.module.clone())
        .collect();
    let mut out = vec![];
    for (file, scan) in scans.iter().filter(|(f, _)| checked(f)) {
        for (abs, line, text) in &scan.uses {
            let to = (1..=abs.len())
                .rev()
                .map(|n| &abs[..n])
                .find(|m| known.contains(*m));
            if let Some(to) = to.filter(|to| *to != scan.module.as_slice()) {
                let (file, from, to, text) =
                    (file.clone(), scan.module.clone(), to.to_vec(), text.clone());
                out.push(Import {
                    file,
                    line: *line,
                    from,
                    to,
                    text,
                });
            }
        }
    }
    (known, out)
}

fn check(files: &BTreeMap<String, String>, layers: Layers, isolated: Isolated) -> Vec<Violation> {
    let (known, imports) = imports(files);
    let layer = |top: &str| {
        layers
            .iter()
            .find(|(_, ms)| ms.contains(&top))
            .map(|(n, _)| *n)
    };
    let tops: BTreeSet<&String> = known.iter().map(|m| &m[0]).collect();
    let mut out: Vec<Violation> = tops
        .into_iter()
        .filter(|t| layer(t).is_none())
        .map(|t| Violation::Unknown(t.clone()))
        .collect();
    for i in &imports {
        if let (Some(from), Some(to)) = (layer(&i.from[0]), layer(&i.to[0]))
            && to > from
        {
            out.push(Violation::Upward(i.clone(), from, to));
        }
        for (parent, shared) in isolated {
            let parent: Vec<&str> = parent.split("::").collect();
            let child = |m: &Module| {
                let under = m.len() > parent.len() && m.iter().zip(&parent).all(|(a, b)| a == b);
                let c = m.get(parent.len()).filter(|_| under)?;
                (!shared.contains(&c.as_str())).then(|| c.clone())
            };
            if let (Some(a), Some(b)) = (child(&i.from), child(&i.to))
                && a != b
            {
                out.push(Violation::Peer(i.clone()));
            }
        }
    }
    // Each import between two children of one parent (their deepest common module) is an edge
    // of that parent's graph; the first import seen is its example.
    let mut graphs: BTreeMap<Module, BTreeMap<(String, String), &Import>> = BTreeMap::new();
    for i in &imports {
        let k = i.from.iter().zip(&i.to).take_while(|(a, b)| a == b).count();
        if k < i.from.len() && k < i.to.len() {
            let edge = (i.from[k].clone(), i.to[k].clone());
            graphs
                .entry(i.from[..k].to_vec())
                .or_default()
                .entry(edge)
                .or_insert(i);
        }
    }
    for (parent, edges) in &graphs {
        for (members, cycle) in cycles(edges.keys()) {
            let examples = cycle.windows(2);
            let examples = examples.map(|w| edges[&(w[0].clone(), w[1].clone())].clone());
            out.push(Violation::Cycle {
                parent: name(parent),
                members,
                examples: examples.collect(),
                cycle,
            });
        }
    }
    out
}

/// Breadth-first from `start`: each reached node → its predecessor on a shortest path.
/// `start` is in it only if it is on a cycle.
fn reach<'a>(edges: &[&'a (String, String)], start: &'a str) -> BTreeMap<&'a str, &'a str> {
    let (mut pred, mut queue) = (BTreeMap::new(), VecDeque::from([start]));
    while let Some(n) = queue.pop_front() {
        for (_, b) in edges.iter().filter(|(a, _)| a == n) {
            if !pred.contains_key(b.as_str()) {
                pred.insert(b.as_str(), n);
                queue.push_back(b);
            }
        }
    }
    pred
}

/// The strongly connected components of more than one node (mutual reachability: the graphs
/// are a few nodes each), each with a shortest cycle through its first member.
fn cycles<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<(Vec<String>, Vec<String>)> {
    let edges: Vec<_> = edges.collect();
    let nodes: BTreeSet<&str> = edges.iter().map(|(a, _)| a.as_str()).collect();
    let (mut seen, mut out) = (BTreeSet::new(), vec![]);
    for n in nodes {
        let pred = reach(&edges, n);
        if seen.contains(n) || !pred.contains_key(n) {
            continue;
        }
        let members: Vec<&str> = pred
            .keys()
            .copied()
            .filter(|m| reach(&edges, m).contains_key(n))
            .collect();
        seen.extend(members.iter().copied());
        let mut cycle = vec![n.to_owned()];
        let mut at = pred[n];
        while at != n {
            cycle.push(at.to_owned());
            at = pred[at];
        }
        cycle.push(n.to_owned());
        cycle.reverse();
        out.push((members.into_iter().map(String::from).collect(), cycle));
    }
    out
}

#[test]
fn src_follows_the_layers() {
    fn read(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                read(root, &path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let file = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .replace('\\', "/");
                files.insert(file, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read(&src, &src, &mut files);
    let violations = check(&files, LAYERS, ISOLATED);
    let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(
        list.is_empty(),
        "{} violations of the layout (tests/layers.rs):\n{}",
        list.len(),
        list.join("\n")
    );
}

// The checker on small made-up trees.

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(f, s)| (f.to_string(), s.to_string()))
        .collect()
}

const TEST_LAYERS: Layers = &[(0, &["crd", "slurm", "a", "d"]), (1, &["controller"])];
const TEST_ISOLATED: Isolated = &[("controller", &["kit"])];

fn run(list: &[(&str, &str)]) -> Vec<String> {
    let short = |v: &Violation| match v {
        Violation::Unknown(top) => format!("unknown {top}"),
        Violation::Upward(i, ..) => format!("upward {} {}", i.file, i.text),
        Violation::Peer(i) => format!("peer {} {}", i.file, i.text),
        Violation::Cycle {
            parent, members, ..
        } => format!("cycle {parent}: {}", members.join(" ")),
    };
    check(&files(list), TEST_LAYERS, TEST_ISOLATED)
        .iter()
        .map(short)
        .collect()
}

#[test]
fn an_upward_import_is_reported_a_downward_one_is_not() {
    let found = run(&[
        ("lib.rs", "pub mod controller; pub mod crd;"),
        ("controller/mod.rs", "use crate::crd::Spec;"),
        (
            "crd/mod.rs",
            "pub fn f() -> crate::controller::Thing { todo!() }",
        ),
    ]);
    assert_eq!(
        found,
        [
            "upward crd/mod.rs crate::controller::Thing",
            "cycle crate: controller crd"
        ]
    );
}

#[test]
fn a_sibling_cycle_is_reported_with_its_members() {
    let list = [
        ("slurm/mod.rs", "mod client; mod convert; mod types;"),
        ("slurm/client.rs", "\nuse super::convert::to_job;"),
        (
            "slurm/convert.rs",
            "fn v() -> &'static str { super::client::API_VERSION }",
        ),
        ("slurm/types.rs", "use crate::slurm::client::Client;"),
    ];
    assert_eq!(run(&list), ["cycle slurm: client convert"]);
    let shown = check(&files(&list), TEST_LAYERS, TEST_ISOLATED)[0].to_string();
    assert!(
        shown.contains("client -> convert: src/slurm/client.rs:2: `super::convert::to_job`"),
        "{shown}"
    );
    assert!(
        shown.contains("convert -> client: src/slurm/convert.rs:1: `super::client::API_VERSION`"),
        "{shown}"
    );
}

#[test]
fn super_self_and_macro_paths_resolve_from_the_module() {
    let list = [
        ("a/mod.rs", ""),
        (
            "a/b.rs",
            "mod inner { fn f() { super::super::c::g(); self::h(); } }\nfn i() { m!(x, crate::d::Z); }",
        ),
        ("a/c.rs", "use self::deep::X; use super::b::*;"),
        ("a/c/deep.rs", ""),
        ("d.rs", ""),
    ];
    let edges: Vec<String> = imports(&files(&list))
        .1
        .iter()
        .map(|i| format!("{} -> {}: {}", name(&i.from), name(&i.to), i.text))
        .collect();
    assert_eq!(
        edges,
        [
            "a::b -> a::c: super::super::c::g",
            "a::b -> d: crate::d::Z",
            "a::c -> a::c::deep: self::deep::X",
            "a::c -> a::b: super::b::*"
        ]
    );
}

#[test]
fn test_code_and_test_module_files_are_skipped() {
    let found = run(&[
        ("lib.rs", "pub mod controller; pub mod crd;"),
        ("controller/mod.rs", ""),
        (
            "crd/mod.rs",
            r#"pub mod cel;
            #[cfg(test)] mod tests;
            #[cfg(test)] #[path = "x_tests.rs"] mod x;
            #[cfg(all(test, unix))] use crate::controller::A;
            #[cfg(any(test, unix))] use crate::controller::H;
            struct S;
            impl S { #[cfg(test)] fn t() { crate::controller::b(); } }
            #[cfg(test)] mod inline { use crate::controller::C; }"#,
        ),
        ("crd/tests.rs", "use crate::controller::D; mod cel;"),
        ("crd/tests/cel.rs", "use crate::controller::E;"),
        ("crd/x_tests.rs", "use crate::controller::F;"),
        // Named like a test module, declared as none: checked.
        ("crd/cel/mod.rs", "pub mod tests;"),
        ("crd/cel/tests.rs", "use crate::controller::G;"),
    ]);
    assert_eq!(
        found,
        [
            "upward crd/cel/tests.rs crate::controller::G",
            "upward crd/mod.rs crate::controller::H"
        ]
    );
}

#[test]
fn an_unknown_top_level_module_is_reported() {
    let found = run(&[
        ("lib.rs", "pub mod context; pub mod crd;"),
        ("context.rs", "use crate::crd::X;"),
        ("crd.rs", ""),
    ]);
    assert_eq!(found, ["unknown context"]);
}

#[test]
fn controllers_use_the_shared_modules_not_each_other() {
    let found = run(&[
        (
            "controller/mod.rs",
            "pub mod cluster; pub mod kit; pub mod nodeset;",
        ),
        (
            "controller/cluster.rs",
            "use crate::controller::nodeset::plan; use super::kit::Backoffs; use super::trim;",
        ),
        ("controller/kit.rs", ""),
        ("controller/nodeset/mod.rs", "use super::kit::Backoffs;"),
        ("controller/nodeset/plan.rs", ""),
    ]);
    assert_eq!(
        found,
        ["peer controller/cluster.rs crate::controller::nodeset::plan"]
    );
}
