//! The crate's layers import only downward: `handlers` → `session` → `turn` → `base` (see the
//! crate docs). Read from the sources, so a new upward `use` fails here, not in review.

use std::path::Path;

/// The layers, lowest first.
const LAYERS: [&str; 4] = ["base", "turn", "session", "handlers"];

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// Every `crate::<layer>` path a file's code names (comments and test modules left out).
fn named_layers(code: &str) -> Vec<(usize, String)> {
    let code = code.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Some(l) = layer(&name) {
                found.push((l, line.trim().to_string()));
            }
        }
    }
    found
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_file_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    let mut layered = 0;
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative.components().next().unwrap().as_os_str();
        let Some(own) = top.to_str().and_then(layer) else {
            continue;
        };
        layered += 1;
        let code = std::fs::read_to_string(&file).unwrap();
        for (named, line) in named_layers(&code) {
            if named > own {
                upward.push(format!("{}: {line}", relative.display()));
            }
        }
    }
    assert!(layered > 30, "the layer folders hold the crate's files");
    assert!(
        upward.is_empty(),
        "imports from a higher layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn an_upward_import_is_seen_and_a_comment_or_test_naming_one_is_not() {
    let code = "use crate::base::deps::Deps;\nuse crate::session::drain;\n\
                // crate::handlers in a comment\n#[cfg(test)]\nmod tests { use crate::handlers; }\n";
    let named: Vec<usize> = named_layers(code).into_iter().map(|(l, _)| l).collect();
    assert_eq!(named, vec![0, 2]);
}
