//! The shape every shipped crate keeps: no production file longer than 600
//! lines, no import circle between the modules of a crate (each module
//! can be read, and changed, knowing only the ones below it), no
//! `Result<_, String>` (an error is a type whose message says what to
//! change, issue 27), and crates that depend only on the crates below
//! them in [`SHIPPED`].
//!
//! The sources are read, not compiled. Comments and literals are blanked
//! first, then every `#[cfg(test)]` item is cut out: tests read their
//! module by nature and are neither counted nor part of the graph. The
//! module tree is walked from each crate root along its `mod name;` lines.
//! Each path a module writes (`crate::`, `super::`, `self::`, a child
//! module, or a name it imported) is resolved to the module that *defines*
//! the item, through re-exports: a facade that only re-exports is no node
//! of a circle, and `mod name;` itself is no edge.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// No production file is longer than this, its tests left out.
const MAX_LINES: usize = 600;

/// The folders of the crates that are built into the proxy or published,
/// lowest first: a crate may depend on the ones before it only. `sim`,
/// `e2e` and `fuzz` are test tooling.
const SHIPPED: [&str; 7] = [
    "preread-parser",
    "preread-core",
    "command",
    "coordinator",
    "worker-shell",
    "control-shell",
    "proxy-shell",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
}

/// A module's path inside its crate (`["server", "changes"]`).
type ModPath = Vec<String>;

/// `text` with comments, strings and character literals turned into
/// spaces, newlines kept, so that neither a path in a string nor a brace
/// in a comment is read as code.
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let end = if c == '/' && next == Some('/') {
            (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len())
        } else if c == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < chars.len() && depth > 0 {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            j
        } else if c == 'r' && !ident_before && matches!(next, Some('"' | '#')) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let body: String = chars[i + 2 + hashes..].iter().collect();
            i + 2 + hashes + body.find(&close).map_or(body.len(), |at| at + close.len())
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && next == Some('\\') {
            let mut j = i + 3;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            j + 1
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        let end = end.min(chars.len());
        out.extend(chars[i..end].iter().map(|&c| keep(c)));
        i = end;
    }
    out
}

/// The index just past the item that starts at `from`: its `;`, or the
/// brace that closes its body, whichever comes first.
fn item_end(code: &[char], from: usize) -> usize {
    let mut depth = 0usize;
    let mut at = from;
    while at < code.len() {
        match code[at] {
            '[' | '(' => depth += 1,
            ']' | ')' => depth = depth.saturating_sub(1),
            ';' if depth == 0 => return at + 1,
            '{' if depth == 0 => {
                let mut braces = 0usize;
                for (j, &c) in code.iter().enumerate().skip(at) {
                    match c {
                        '{' => braces += 1,
                        '}' => {
                            braces -= 1;
                            if braces == 0 {
                                return j + 1;
                            }
                        }
                        _ => {}
                    }
                }
                return code.len();
            }
            _ => {}
        }
        at += 1;
    }
    code.len()
}

/// Blanked code without its `#[cfg(test)]` items, and how many lines
/// those items took.
fn without_tests(blanked: &str) -> (String, usize) {
    let mut code: Vec<char> = blanked.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut cut = 0;
    let mut at = 0;
    while at + marker.len() <= code.len() {
        if code[at..at + marker.len()] != marker[..] {
            at += 1;
            continue;
        }
        let end = item_end(&code, at + marker.len());
        // The item's last line goes with it.
        cut += 1;
        for c in &mut code[at..end] {
            if *c == '\n' {
                cut += 1;
            } else {
                *c = ' ';
            }
        }
        at = end;
    }
    (code.into_iter().collect(), cut)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Colons,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(Token::Ident(if word == "$crate" {
                "crate".into()
            } else {
                word
            }));
            continue;
        }
        if c == '\'' {
            // A lifetime (literals are blanked): `'static` defines nothing.
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::Colons);
            i += 2;
            continue;
        }
        if !c.is_whitespace() {
            out.push(Token::Punct(c));
        }
        i += 1;
    }
    out
}

/// What one module is made of, as far as paths are concerned.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Items the module defines at its top level.
    defined: BTreeSet<String>,
    /// `#[macro_export]` macros, which live at the crate root.
    exported_macros: BTreeSet<String>,
    /// Names its top-level `use` lines bring in, with their full paths.
    imports: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    /// Every path its code writes, `use` lines included.
    paths: Vec<Vec<String>>,
}

const ITEM_KEYWORDS: [&str; 8] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union",
];

/// The leaves of one `use` tree: the full path, the name it binds (none
/// for a glob).
fn use_tree(
    tokens: &[Token],
    at: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    loop {
        match tokens.get(*at) {
            Some(Token::Ident(word)) if word == "as" => {
                *at += 1;
                if let Some(Token::Ident(alias)) = tokens.get(*at) {
                    *at += 1;
                    out.push((path, Some(alias.clone())));
                }
                return;
            }
            Some(Token::Ident(word)) => {
                if word == "self" && !path.is_empty() {
                    *at += 1;
                    let name = path.last().cloned();
                    out.push((path, name));
                    return;
                }
                path.push(word.clone());
                *at += 1;
            }
            Some(Token::Colons) => *at += 1,
            Some(Token::Punct('*')) => {
                *at += 1;
                out.push((path, None));
                return;
            }
            Some(Token::Punct('{')) => {
                *at += 1;
                while !matches!(tokens.get(*at), None | Some(Token::Punct('}'))) {
                    use_tree(tokens, at, path.clone(), out);
                    if tokens.get(*at) == Some(&Token::Punct(',')) {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            _ => {
                let name = path.last().cloned();
                if name.is_some() {
                    out.push((path, name));
                }
                return;
            }
        }
    }
}

fn next_ident(tokens: &[Token], at: usize) -> Option<&str> {
    match tokens.get(at) {
        Some(Token::Ident(word)) => Some(word),
        _ => None,
    }
}

fn read_module(file: &Path, code: &str) -> Module {
    let tokens = tokens(code);
    let mut module = Module {
        file: file.to_owned(),
        ..Module::default()
    };
    let mut depth = 0usize;
    let mut exported = false;
    let mut at = 0;
    while at < tokens.len() {
        let word = match &tokens[at] {
            Token::Ident(word) => word.as_str(),
            Token::Punct('{') => {
                depth += 1;
                at += 1;
                continue;
            }
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                at += 1;
                continue;
            }
            Token::Colons | Token::Punct(_) => {
                at += 1;
                continue;
            }
        };
        match word {
            "use" => {
                at += 1;
                if tokens.get(at) == Some(&Token::Colons) {
                    at += 1;
                }
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut at, Vec::new(), &mut leaves);
                for (path, name) in leaves {
                    if depth == 0 {
                        match name {
                            Some(name) => {
                                module.imports.insert(name, path.clone());
                            }
                            None => module.globs.push(path.clone()),
                        }
                    }
                    module.paths.push(path);
                }
                continue;
            }
            "mod" if depth == 0 => {
                if let Some(name) = next_ident(&tokens, at + 1) {
                    if tokens.get(at + 2) == Some(&Token::Punct(';')) {
                        module.children.insert(name.to_owned());
                    } else {
                        module.defined.insert(name.to_owned());
                    }
                }
            }
            "macro_export" => exported = true,
            "macro_rules" => {
                if let Some(name) = next_ident(&tokens, at + 2) {
                    let into = if exported {
                        &mut module.exported_macros
                    } else {
                        &mut module.defined
                    };
                    into.insert(name.to_owned());
                }
                exported = false;
            }
            _ if depth == 0 && ITEM_KEYWORDS.contains(&word) => {
                if let Some(name) = next_ident(&tokens, at + 1) {
                    if !ITEM_KEYWORDS.contains(&name) {
                        module.defined.insert(name.to_owned());
                    }
                }
            }
            _ => {
                // A path in code, read from its first segment.
                let mut path = vec![word.to_owned()];
                let mut next = at + 1;
                while tokens.get(next) == Some(&Token::Colons) {
                    match next_ident(&tokens, next + 1) {
                        Some(segment) => path.push(segment.to_owned()),
                        None => break,
                    }
                    next += 2;
                }
                let continues = at > 0 && tokens[at - 1] == Token::Colons;
                if path.len() > 1 && !continues {
                    module.paths.push(path);
                }
                at = next;
                continue;
            }
        }
        at += 1;
    }
    module
}

/// One crate: a root file and the module tree its `mod` lines build.
#[derive(Debug)]
struct Crate {
    name: String,
    modules: BTreeMap<ModPath, Module>,
    /// Production lines of each file.
    lines: BTreeMap<PathBuf, usize>,
    /// Each file's production code: blanked, its tests cut out.
    code: BTreeMap<PathBuf, String>,
}

/// The file of module `name` declared in `parent`.
fn child_file(parent: &Path, name: &str, exists: &dyn Fn(&Path) -> bool) -> PathBuf {
    let stem = parent
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let dir = parent.parent().unwrap_or(Path::new(""));
    let dir = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_owned()
    } else {
        dir.join(stem)
    };
    let flat = dir.join(format!("{name}.rs"));
    if exists(&flat) {
        return flat;
    }
    let nested = dir.join(name).join("mod.rs");
    assert!(
        exists(&nested),
        "`mod {name};` of {}: neither {} nor {} exists",
        parent.display(),
        flat.display(),
        nested.display()
    );
    nested
}

fn read_crate(name: &str, root_file: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let mut krate = Crate {
        name: name.to_owned(),
        modules: BTreeMap::new(),
        lines: BTreeMap::new(),
        code: BTreeMap::new(),
    };
    let mut queue = VecDeque::from([(Vec::new(), root_file.to_owned())]);
    while let Some((path, file)) = queue.pop_front() {
        let text = read(&file).unwrap_or_else(|| panic!("{} is readable", file.display()));
        let (code, cut) = without_tests(&blank(&text));
        krate
            .lines
            .insert(file.clone(), text.lines().count().saturating_sub(cut));
        let module = read_module(&file, &code);
        krate.code.insert(file.clone(), code);
        for child in &module.children {
            let mut child_path = path.clone();
            child_path.push(child.clone());
            queue.push_back((child_path, child_file(&file, child, &|p| read(p).is_some())));
        }
        krate.modules.insert(path, module);
    }
    krate
}

impl Crate {
    /// The module that defines what `path`, written in module `from`,
    /// names; `None` for a path outside the crate.
    fn resolve(&self, from: &[String], path: &[String], hops: usize) -> Option<ModPath> {
        if hops > 32 {
            return None;
        }
        let first = path.first()?;
        match first.as_str() {
            "crate" => self.walk(Vec::new(), &path[1..], hops),
            "super" | "self" => {
                let mut at = from.to_vec();
                let mut rest = path;
                while let Some(segment) = rest.first() {
                    match segment.as_str() {
                        "super" => {
                            at.pop()?;
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                self.walk(at, rest, hops)
            }
            _ => {
                let module = self.modules.get(from)?;
                if module.children.contains(first) {
                    let mut at = from.to_vec();
                    at.push(first.clone());
                    self.walk(at, &path[1..], hops)
                } else if let Some(import) = module.imports.get(first) {
                    let full: Vec<String> = import.iter().chain(&path[1..]).cloned().collect();
                    self.resolve(from, &full, hops + 1)
                } else {
                    None
                }
            }
        }
    }

    /// From module `at`, the module that defines `rest`.
    fn walk(&self, mut at: ModPath, rest: &[String], hops: usize) -> Option<ModPath> {
        let Some(first) = rest.first() else {
            return Some(at);
        };
        let module = self.modules.get(&at)?;
        if module.children.contains(first) {
            at.push(first.clone());
            return self.walk(at, &rest[1..], hops);
        }
        if module.defined.contains(first) {
            return Some(at);
        }
        if at.is_empty() {
            let exporter = self
                .modules
                .iter()
                .find(|(_, m)| m.exported_macros.contains(first));
            if let Some((path, _)) = exporter {
                return Some(path.clone());
            }
        }
        if let Some(import) = module.imports.get(first) {
            let full: Vec<String> = import.iter().chain(&rest[1..]).cloned().collect();
            return self.resolve(&at, &full, hops + 1).or(Some(at));
        }
        for glob in &module.globs {
            let Some(source) = self.resolve(&at, glob, hops + 1) else {
                continue;
            };
            let provides = self.modules.get(&source).is_some_and(|m| {
                m.children.contains(first)
                    || m.defined.contains(first)
                    || m.imports.contains_key(first)
            });
            if provides && source != at {
                return self.walk(source, rest, hops + 1);
            }
        }
        Some(at)
    }

    /// `a -> b` when module `a` names an item that module `b` defines.
    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, module) in &self.modules {
            let out = edges.entry(from.clone()).or_default();
            for path in &module.paths {
                if let Some(to) = self.resolve(from, path, 0) {
                    if &to != from {
                        out.insert(to);
                    }
                }
            }
        }
        edges
    }

    /// The edges between siblings. An edge of two modules is seen where
    /// their paths part, as `a`'s ancestor there -> `b`'s, with the file
    /// edge that makes it. An edge between a module and its own ancestor
    /// is none: a parent is made of its children, and a child may read
    /// its parent's items as long as no sibling reads the child back.
    fn sibling_edges(&self) -> BTreeMap<ModPath, Level> {
        let mut levels: BTreeMap<ModPath, Level> = BTreeMap::new();
        for (from, targets) in self.edges() {
            for to in targets {
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                levels
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .entry(to[common].clone())
                    .or_insert_with(|| (from.clone(), to.clone()));
            }
        }
        levels
    }

    fn file(&self, module: &[String]) -> String {
        self.modules[module].file.display().to_string()
    }

    /// One circle for each group of sibling modules that reach each
    /// other, with the file edges that close it.
    fn circles(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (level, edges) in self.sibling_edges() {
            let mut shown: BTreeSet<&String> = BTreeSet::new();
            for node in edges.keys() {
                let parents = reach(&edges, node);
                if shown.contains(node) || !parents.contains_key(node) {
                    continue;
                }
                let mut circle = vec![node];
                let mut at = parents[node];
                while at != node {
                    circle.push(at);
                    at = parents[at];
                }
                circle.push(node);
                circle.reverse();
                let group: Vec<&str> = parents
                    .keys()
                    .filter(|other| reach(&edges, other).contains_key(node))
                    .map(|n| n.as_str())
                    .collect();
                shown.extend(
                    parents
                        .keys()
                        .filter(|other| group.contains(&other.as_str())),
                );
                let names: Vec<&str> = circle.iter().map(|n| n.as_str()).collect();
                let witnesses: Vec<String> = circle
                    .windows(2)
                    .map(|pair| {
                        let (from, to) = &edges[pair[0]][pair[1]];
                        format!("{} names {}", self.file(from), self.file(to))
                    })
                    .collect();
                let others = if group.len() > names.len() - 1 {
                    format!("; the modules {} all reach each other", group.join(", "))
                } else {
                    String::new()
                };
                found.push(format!(
                    "{}, under {}: {} ({}{others})",
                    self.name,
                    self.file(&level),
                    names.join(" -> "),
                    witnesses.join("; ")
                ));
            }
        }
        found
    }
}

/// Every node `from` reaches, each with the node it was reached from:
/// breadth first, so the circle shown is a shortest one.
fn reach<'a>(edges: &'a Level, from: &'a String) -> BTreeMap<&'a String, &'a String> {
    let mut parent = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        for next in edges.get(at).into_iter().flat_map(BTreeMap::keys) {
            if !parent.contains_key(next) {
                parent.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    parent
}

/// The sibling edges under one module: `from -> to -> (file edge)`.
type Level = BTreeMap<String, BTreeMap<String, (ModPath, ModPath)>>;

/// Every crate root of the shipped crates, read from the disk.
fn shipped() -> Vec<Crate> {
    let read = |path: &Path| std::fs::read_to_string(root().join(path)).ok();
    let mut crates = Vec::new();
    for name in SHIPPED {
        let src = Path::new(name).join("src");
        let mut roots = vec![src.join("lib.rs"), src.join("main.rs")];
        if let Ok(bins) = std::fs::read_dir(root().join(&src).join("bin")) {
            roots.extend(bins.map(|e| {
                e.expect("a folder entry")
                    .path()
                    .strip_prefix(root())
                    .expect("in the workspace")
                    .to_owned()
            }));
        }
        for file in roots.into_iter().filter(|f| read(f).is_some()) {
            crates.push(read_crate(name, &file, &read));
        }
    }
    crates
}

#[test]
fn no_production_file_is_longer_than_600_lines() {
    let crates = shipped();
    let files: usize = crates.iter().map(|c| c.lines.len()).sum();
    assert!(files > 100, "found the shipped files: {files}");
    let long: Vec<String> = crates
        .iter()
        .flat_map(|c| &c.lines)
        .filter(|&(_, &lines)| lines > MAX_LINES)
        .map(|(file, lines)| format!("{}: {lines} lines besides its tests", file.display()))
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:#?}");
}

#[test]
fn no_shipped_crate_imports_a_circle() {
    let crates = shipped();
    let shell = crates
        .iter()
        .find(|c| c.name == "worker-shell" && c.modules.contains_key(&vec!["worker".to_owned()]))
        .expect("the data-plane shell's library");
    let edges = shell.edges();
    let loop_module: ModPath = vec!["worker".into(), "event_loop".into()];
    assert!(
        edges[&loop_module].contains(&vec!["worker".to_owned(), "drive".to_owned()]),
        "the graph was read: {:#?}",
        edges[&loop_module]
    );
    let circles: Vec<String> = crates.iter().flat_map(Crate::circles).collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

/// The 1-based lines of `code` (blanked, tests cut) where a `Result<…>`
/// takes `String` as its error type, however the arguments nest or wrap:
/// `Result<T, String>`, `Result<Vec<u8>,\n String,\n>`, an alias `type
/// R<T> = Result<T, String>`, `std::result::Result<T, std::string::String>`.
/// `io::Result<String>` is none: its error is an `io::Error`.
fn string_error_lines(code: &str) -> Vec<usize> {
    let chars: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = chars[at..]
        .windows(6)
        .position(|w| w.iter().copied().eq("Result".chars()))
    {
        let start = at + offset;
        // Past the name only: a `Result` among the arguments is read next.
        at = start + 6;
        let whole_word = (start == 0 || !is_ident(chars[start - 1]))
            && chars.get(at).is_none_or(|&c| !is_ident(c));
        let mut open = at;
        while chars.get(open).is_some_and(|c| c.is_whitespace()) {
            open += 1;
        }
        if !whole_word || chars.get(open) != Some(&'<') {
            continue;
        }
        // Where each top-level argument starts, and where the list ends.
        let (mut angles, mut nested) = (0usize, 0usize);
        let mut starts = vec![open + 1];
        let mut end = None;
        for (i, &c) in chars.iter().enumerate().skip(open) {
            match c {
                '<' => angles += 1,
                // The arrow of an `Fn() -> T` argument closes nothing.
                '>' if i > 0 && chars[i - 1] == '-' => {}
                '>' => {
                    angles -= 1;
                    if angles == 0 {
                        end = Some(i);
                        break;
                    }
                }
                '(' | '[' => nested += 1,
                ')' | ']' => nested = nested.saturating_sub(1),
                ',' if angles == 1 && nested == 0 => starts.push(i + 1),
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let args: Vec<String> = starts
            .iter()
            .zip(starts.iter().skip(1).map(|&s| s - 1).chain([end]))
            .map(|(&from, to)| {
                chars[from..to]
                    .iter()
                    .filter(|c| !c.is_whitespace())
                    .collect()
            })
            .filter(|arg: &String| !arg.is_empty())
            .collect();
        let error = match args.as_slice() {
            [_, error] => error.as_str(),
            _ => continue,
        };
        if matches!(
            error,
            "String" | "std::string::String" | "alloc::string::String" | "::std::string::String"
        ) {
            found.push(chars[..start].iter().filter(|&&c| c == '\n').count() + 1);
        }
    }
    found
}

#[test]
fn no_shipped_code_returns_a_string_as_its_error() {
    let crates = shipped();
    let mut left: Vec<String> = Vec::new();
    let mut files = 0;
    for (file, code) in crates.iter().flat_map(|c| &c.code) {
        files += 1;
        left.extend(
            string_error_lines(code)
                .into_iter()
                .map(|line| format!("{}:{line}", file.display())),
        );
    }
    assert!(files > 100, "found the shipped files: {files}");
    assert!(
        left.is_empty(),
        "`Result<_, String>` in shipped code (return a typed error whose message says what \
         to change): {left:#?}"
    );
}

#[test]
fn a_planted_string_error_is_found_however_it_is_written_and_tests_are_left_out() {
    let lib = "mod shaped;\n\
               pub fn plain() -> Result<(), String> { Ok(()) }\n\
               pub fn nested() -> Result<Vec<Option<u8>>, String> { Ok(Vec::new()) }\n\
               pub type Alias<T> = std::result::Result<T, std::string::String>;\n\
               pub fn wrapped() -> Result<\n    (u8, u8),\n    String,\n> { Ok((0, 0)) }\n\
               pub fn parser() -> impl Fn(&str) -> Result<u64, String> { |_| Ok(0) }\n\
               pub fn inner() -> Result<Result<(), String>, Error> { todo() }\n";
    let shaped = "pub fn io() -> std::io::Result<String> { Ok(String::new()) }\n\
                  pub fn typed() -> Result<String, Error> { todo() }\n\
                  pub fn closure() -> Result<Box<dyn Fn() -> String>, Error> { todo() }\n\
                  pub struct MyResult<T>(T);\n\
                  pub fn mine() -> MyResult<String> { todo() }\n\
                  const TEXT: &str = \"Result<(), String>\"; // Result<(), String>\n\
                  #[cfg(test)]\nmod tests {\n    fn t() -> Result<(), String> { Ok(()) }\n}\n";
    let krate = planted(&[("lib.rs", lib), ("shaped.rs", shaped)]);
    assert_eq!(
        string_error_lines(&krate.code[Path::new("src/lib.rs")]),
        [2, 3, 4, 5, 9, 10]
    );
    assert_eq!(
        string_error_lines(&krate.code[Path::new("src/shaped.rs")]),
        Vec::<usize>::new()
    );
}

/// The workspace crates each manifest depends on (its `[dependencies]`
/// and `[build-dependencies]`, by package name, a `package =` rename
/// followed), that are not below it: `manifests` are `(folder, Cargo.toml
/// text)` pairs, lowest first. Dev-dependencies are left out: a test may
/// drive a crate from above, and cargo builds no circle from them.
fn upward_arrows(manifests: &[(&str, &str)]) -> Vec<String> {
    let parsed: Vec<(&str, toml::Table)> = manifests
        .iter()
        .map(|(folder, text)| (*folder, text.parse().expect("a Cargo.toml")))
        .collect();
    let names: Vec<&str> = parsed
        .iter()
        .map(|(_, m)| m["package"]["name"].as_str().expect("a package name"))
        .collect();
    let mut upward = Vec::new();
    for (at, (folder, manifest)) in parsed.iter().enumerate() {
        for table in ["dependencies", "build-dependencies"] {
            let Some(deps) = manifest.get(table).and_then(toml::Value::as_table) else {
                continue;
            };
            for (key, dep) in deps {
                let name = dep
                    .get("package")
                    .and_then(toml::Value::as_str)
                    .unwrap_or(key);
                if let Some(to) = names.iter().position(|&n| n == name)
                    && to >= at
                {
                    upward.push(format!(
                        "{folder} ({}) depends on {name}, which is not below it",
                        names[at]
                    ));
                }
            }
        }
    }
    upward
}

fn shipped_manifests() -> Vec<(&'static str, String)> {
    SHIPPED
        .iter()
        .map(|folder| {
            let path = root().join(folder).join("Cargo.toml");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (*folder, text)
        })
        .collect()
}

#[test]
fn shipped_crates_depend_only_downwards() {
    let manifests = shipped_manifests();
    let pairs: Vec<(&str, &str)> = manifests.iter().map(|(f, t)| (*f, t.as_str())).collect();
    assert!(
        pairs
            .iter()
            .any(|(f, t)| *f == "proxy-shell" && t.contains("preread-control")),
        "the manifests were read"
    );
    let upward = upward_arrows(&pairs);
    assert!(upward.is_empty(), "arrows that go up: {upward:#?}");
}

#[test]
fn a_planted_upward_dependency_is_found() {
    let low = "[package]\nname = \"low\"\n[dependencies]\nlog = \"0.4\"\n\
               [dev-dependencies]\nhigh = { path = \"../high\" }\n";
    let high = "[package]\nname = \"high\"\n[dependencies]\nlow = { path = \"../low\" }\n";
    assert_eq!(
        upward_arrows(&[("low", low), ("high", high)]),
        Vec::<String>::new()
    );
    let renamed = "[package]\nname = \"low\"\n[dependencies]\n\
                   up = { package = \"high\", path = \"../high\" }\n";
    assert_eq!(
        upward_arrows(&[("low", renamed), ("high", high)]),
        ["low (low) depends on high, which is not below it"]
    );
    let own = "[package]\nname = \"low\"\n[build-dependencies]\nlow.workspace = true\n";
    assert_eq!(
        upward_arrows(&[("low", own)]),
        ["low (low) depends on low, which is not below it"]
    );
}

/// A crate in memory, `(file, text)` pairs under `src/`.
fn planted(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(name, text)| (Path::new("src").join(name), (*text).to_owned()))
        .collect();
    read_crate("planted", Path::new("src/lib.rs"), &|path| {
        files.get(path).cloned()
    })
}

#[test]
fn a_planted_circle_is_found_through_a_re_export_and_tests_are_left_out() {
    let lib = "mod low;\nmod high;\npub use high::Facade;\n";
    let high = "use crate::low::Low;\npub struct Facade(Low);\n";
    let quiet = "pub struct Low;\nfn f() -> &'static str { \"crate::Facade\" } // crate::Facade\n\
                 #[cfg(test)]\nmod tests {\n    use crate::Facade;\n}\n";
    assert_eq!(
        planted(&[("lib.rs", lib), ("high.rs", high), ("low.rs", quiet)]).circles(),
        Vec::<String>::new()
    );
    let upward = "pub struct Low;\npub fn up() -> crate::Facade { todo() }\n";
    assert_eq!(
        planted(&[("lib.rs", lib), ("high.rs", high), ("low.rs", upward)]).circles(),
        [
            "planted, under src/lib.rs: high -> low -> high (src/high.rs names src/low.rs; src/low.rs names src/high.rs)"
        ]
    );
    let nested = planted(&[
        ("lib.rs", "mod low;\npub struct Top;\n"),
        (
            "low/mod.rs",
            "mod deep;\nmod other;\npub struct Low;\nfn f() { deep::g() }\n",
        ),
        (
            "low/deep.rs",
            "use super::{Low, other::*};\npub fn g() -> Low { h() }\n",
        ),
        (
            "low/other.rs",
            "pub fn h() -> super::Low { crate::Top; super::deep::g() }\n",
        ),
    ]);
    assert_eq!(
        nested.circles(),
        [
            "planted, under src/low/mod.rs: deep -> other -> deep (src/low/deep.rs names src/low/other.rs; src/low/other.rs names src/low/deep.rs)"
        ]
    );
}

#[test]
fn production_lines_leave_the_tests_out() {
    let code = "fn a() {}\n".repeat(MAX_LINES);
    let tests = format!(
        "#[cfg(test)]\nmod tests {{\n{}}}\n",
        "    fn t() {}\n".repeat(100)
    );
    let krate = planted(&[("lib.rs", &format!("{code}{tests}"))]);
    assert_eq!(krate.lines[Path::new("src/lib.rs")], MAX_LINES);
    let krate = planted(&[("lib.rs", &format!("{code}fn one_more() {{}}\n{tests}"))]);
    assert_eq!(krate.lines[Path::new("src/lib.rs")], MAX_LINES + 1);
}
