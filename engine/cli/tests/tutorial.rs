//! Runs the commands of docs/tutorial.md, so the tutorial cannot drift from the `kiln` binary.
//!
//! The rules the page follows:
//! - Every line of a ```` ```sh ```` block is a `kiln` command (optionally preceded by
//!   `NAME=value` environment settings), a `#` comment or blank; a trailing `\` continues a
//!   command on the next line. Shell syntax beyond words and quotes (pipes, redirections,
//!   `$`, globs) is refused, since the test runs the command without a shell.
//! - Commands run in order, in one scratch folder prepared as the page's set-up block does
//!   (`mnist.onnx`, and `vit/` holding the PyTorch export), with the binary under test as
//!   `kiln` and `RUST_LOG` unset unless the command sets it. Each must exit with status 0.
//! - A ```` ```text ```` block right after a `sh` block shows output of that block's last
//!   command: each of its lines must appear in the output (stdout, then stderr), in order,
//!   where `…` stands for any text (a line of only `…` marks omitted lines; lines may be
//!   omitted anyway).
//! - A command that names the wgpu backend is skipped, with `SKIPPED` on stderr, where
//!   `kiln devices` reports no wgpu adapter.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use tempfile::TempDir;

/// One command of a `sh` block, with the output shown after its block, if any.
#[derive(Debug)]
struct DocCommand {
    /// 1-based line in docs/tutorial.md.
    line: usize,
    text: String,
    env: Vec<(String, String)>,
    args: Vec<String>,
    expected: Vec<String>,
}

/// Every command of the tutorial's `sh` blocks, in order.
fn doc_commands(markdown: &str) -> Vec<DocCommand> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut commands: Vec<DocCommand> = Vec::new();
    let mut i = 0;
    // Index in `commands` of the last command of the `sh` block just closed, while only blank
    // lines follow it.
    let mut last_of_block: Option<usize> = None;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let Some(info) = line.strip_prefix("```") else {
            if !line.is_empty() {
                last_of_block = None;
            }
            i += 1;
            continue;
        };
        let start = i + 1;
        let end = (start..lines.len()).find(|&j| lines[j].trim_end() == "```").unwrap_or_else(|| {
            panic!("docs/tutorial.md line {}: the code block never closes", i + 1)
        });
        let body = &lines[start..end];
        match info.trim() {
            "sh" => {
                let before = commands.len();
                commands.extend(block_commands(body, start + 1));
                assert!(commands.len() > before, "docs/tutorial.md line {}: a sh block without a command", i + 1);
                last_of_block = Some(commands.len() - 1);
            }
            "text" => {
                if let Some(index) = last_of_block {
                    commands[index].expected = body.iter().map(|l| l.trim_end().to_string()).collect();
                }
                last_of_block = None;
            }
            _ => last_of_block = None,
        }
        i = end + 1;
    }
    commands
}

/// The commands of one `sh` block whose first line is line `first_line` of the file.
fn block_commands(body: &[&str], first_line: usize) -> Vec<DocCommand> {
    let mut commands = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (offset, raw) in body.iter().enumerate() {
        let number = first_line + offset;
        let line = raw.trim();
        let (start, mut text) = match pending.take() {
            Some((start, text)) => (start, text + " "),
            None if line.is_empty() || line.starts_with('#') => continue,
            None => (number, String::new()),
        };
        match line.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head.trim_end());
                pending = Some((start, text));
            }
            None => {
                text.push_str(line);
                commands.push(parse_command(start, text));
            }
        }
    }
    assert!(pending.is_none(), "docs/tutorial.md line {first_line}: a sh block ends in a `\\` continuation");
    commands
}

fn parse_command(line: usize, text: String) -> DocCommand {
    let mut words = split_words(&text).unwrap_or_else(|e| panic!("docs/tutorial.md line {line}: {e}: {text}")).into_iter();
    let mut env = Vec::new();
    let mut program = None;
    for word in words.by_ref() {
        match word.split_once('=') {
            Some((name, value)) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                env.push((name.to_string(), value.to_string()))
            }
            _ => {
                program = Some(word);
                break;
            }
        }
    }
    assert_eq!(
        program.as_deref(),
        Some("kiln"),
        "docs/tutorial.md line {line}: a sh block holds only kiln commands (others go in a bash block): {text}"
    );
    DocCommand { line, text, env, args: words.collect(), expected: Vec::new() }
}

/// Splits a command line into words: whitespace separates, single and double quotes group.
/// Refuses what only a shell would interpret.
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '|' | '&' | ';' | '<' | '>' | '$' | '`' | '*' | '?' | '\\' | '(' | ')') => {
                return Err(format!("shell syntax `{c}` that the test cannot run"));
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err("an unclosed quote".into());
    }
    words.extend(word);
    Ok(words)
}

/// Whether `expected` (lines with `…` for any text) appears in `output` in order.
fn missing_lines(expected: &[String], output: &str) -> Option<String> {
    let actual: Vec<&str> = output.lines().collect();
    let mut at = 0;
    for want in expected.iter().filter(|l| !l.trim().is_empty() && l.trim() != "…") {
        let fragments: Vec<&str> = want.split('…').collect();
        let found = (at..actual.len()).find(|&i| contains_in_order(actual[i], &fragments));
        match found {
            Some(i) => at = i + 1,
            None => return Some(want.clone()),
        }
    }
    None
}

fn contains_in_order(line: &str, fragments: &[&str]) -> bool {
    let mut rest = line;
    for (i, fragment) in fragments.iter().enumerate() {
        if fragment.is_empty() {
            continue;
        }
        // The first fragment starts the line unless `…` precedes it; the last ends it
        // unless `…` follows it.
        let last = i == fragments.len() - 1;
        let pos = if i == 0 {
            rest.starts_with(fragment).then_some(0).filter(|_| !last || rest.len() == fragment.len())
        } else if last {
            rest.rfind(fragment).filter(|p| p + fragment.len() == rest.len())
        } else {
            rest.find(fragment)
        };
        match pos {
            Some(p) => rest = &rest[p + fragment.len()..],
            None => return false,
        }
    }
    true
}

fn copy_into(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

/// The scratch folder of the tutorial's set-up block.
fn scratch_folder() -> TempDir {
    let dir = TempDir::new().expect("temp dir");
    copy_into(&repo_path("examples/models/mnist.onnx"), &dir.path().join("mnist.onnx"));
    let vit = dir.path().join("vit");
    std::fs::create_dir(&vit).unwrap();
    let fixture = repo_path("tests/data/zoo/vit_dynamo_dynamic");
    for entry in std::fs::read_dir(&fixture).expect("the PyTorch export in tests/data/zoo/vit_dynamo_dynamic") {
        let path = entry.unwrap().path();
        copy_into(&path, &vit.join(path.file_name().unwrap()));
    }
    dir
}

#[test]
fn tutorial_commands_run_as_documented() {
    let markdown = std::fs::read_to_string(repo_path("docs/tutorial.md")).expect("docs/tutorial.md");
    let commands = doc_commands(&markdown);
    assert!(commands.len() >= 10, "only {} commands found in docs/tutorial.md", commands.len());
    assert!(commands.iter().filter(|c| !c.expected.is_empty()).count() >= 5, "too few outputs shown");

    let dir = scratch_folder();
    let wgpu_available = kiln_ok(&["devices"]).contains("wgpu: available");
    for command in &commands {
        if command.args.iter().any(|a| a.split(',').any(|b| b == "wgpu")) && !wgpu_available {
            eprintln!("SKIPPED: no wgpu adapter: line {}: {}", command.line, command.text);
            continue;
        }
        let start = Instant::now();
        let mut process = Command::new(env!("CARGO_BIN_EXE_kiln"));
        process.current_dir(dir.path()).args(&command.args).env_remove("RUST_LOG");
        for (name, value) in &command.env {
            process.env(name, value);
        }
        let out = process.output().expect("start kiln");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        eprintln!("{:6.0} ms  line {}: {}", start.elapsed().as_secs_f64() * 1e3, command.line, command.text);
        assert!(
            out.status.success(),
            "docs/tutorial.md line {}: `{}` exited with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            command.line,
            command.text,
            out.status
        );
        if let Some(line) = missing_lines(&command.expected, &format!("{stdout}{stderr}")) {
            panic!(
                "docs/tutorial.md line {}: the output of `{}` has no line matching\n  {line}\n(after the lines \
                 matched before it; `…` stands for any text)\nstdout:\n{stdout}\nstderr:\n{stderr}",
                command.line, command.text
            );
        }
    }
}

#[test]
fn expected_lines_match_with_ellipses() {
    let output = "model:    mnist.onnx\nbuild:    12.5 ms\n  passes: 2 ms\n";
    let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(missing_lines(&lines(&["model:    mnist.onnx", "…", "build:    … ms"]), output), None);
    assert_eq!(missing_lines(&lines(&["…passes: … ms"]), output), None);
    // In order, anchored at both ends unless `…` frees them.
    assert!(missing_lines(&lines(&["build:    … ms", "model:    mnist.onnx"]), output).is_some());
    assert!(missing_lines(&lines(&["passes: 2 ms"]), output).is_some());
    assert!(missing_lines(&lines(&["build:"]), output).is_some());
    assert_eq!(missing_lines(&lines(&["build:…"]), output), None);
}

#[test]
fn sh_blocks_parse_into_commands() {
    let doc = "```sh\n# a comment\nRUST_LOG=kiln=debug kiln build m.onnx \\\n  -o 'm engine'\n```\n\n```text\nbuild: …\n```\n";
    let commands = doc_commands(doc);
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0].line, 3);
    assert_eq!(commands[0].env, vec![("RUST_LOG".to_string(), "kiln=debug".to_string())]);
    assert_eq!(commands[0].args, ["build", "m.onnx", "-o", "m engine"]);
    assert_eq!(commands[0].expected, ["build: …"]);
    assert!(split_words("kiln run m.onnx | head").is_err());
}
