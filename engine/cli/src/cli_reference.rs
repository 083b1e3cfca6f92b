//! The command-line reference, `docs/cli.md`, rendered from the clap definitions in
//! `main.rs`, and the test that keeps the file equal to the rendering.
//!
//! When a flag changes, regenerate the file:
//! `KILN_UPDATE_DOCS=1 cargo test --workspace --bin kiln cli_reference`.

use clap::{Arg, ArgAction, Command, CommandFactory};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The command that rewrites `docs/cli.md`.
const REGENERATE: &str = "KILN_UPDATE_DOCS=1 cargo test --workspace --bin kiln cli_reference";

/// `docs/cli.md`, from the repository root.
fn reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md")
}

/// The whole reference as markdown: the global options once, then every subcommand (nested
/// ones under their parent) with its description, usage, arguments and options.
pub fn render() -> String {
    let mut root = crate::Cli::command();
    // Building sets every subcommand's full name (`kiln cache merge`) for its usage line.
    root.build();
    let mut out = String::new();
    out.push_str("# `kiln` command-line reference\n\n");
    out.push_str(&format!(
        "<!-- Generated from the clap definitions in engine/cli/src/main.rs by \
         engine/cli/src/cli_reference.rs. Do not edit by hand; regenerate with\n     {REGENERATE} -->\n\n"
    ));
    if let Some(about) = root.get_long_about().or(root.get_about()) {
        out.push_str(&format!("{}\n\n", sentence(&about.to_string())));
    }
    out.push_str(&format!("```text\n{}\n```\n\n", usage(&mut root)));
    out.push_str(
        "Every command prints its help with `-h` (a summary) or `--help` (the full text, as \
         here), e.g. `kiln build --help`; `kiln --version` prints the version.\n\n",
    );

    out.push_str("## Commands\n\n");
    for sub in documented_subcommands(&root) {
        let about = sub.get_about().map(|a| sentence(&a.to_string())).unwrap_or_default();
        out.push_str(&format!("- [`kiln {}`](#{}): {}\n", sub.get_name(), anchor(&format!("kiln {}", sub.get_name())), about));
    }
    out.push('\n');

    out.push_str("## Global options\n\n");
    out.push_str("These apply to every command and may come before or after its name.\n\n");
    for arg in root.get_arguments().filter(|a| a.is_global_set() && !a.is_hide_set()) {
        render_arg(&mut out, arg);
    }
    out.push('\n');

    let names: Vec<String> = documented_subcommands(&root).map(|c| c.get_name().to_string()).collect();
    for name in names {
        let sub = root.find_subcommand_mut(&name).expect("listed subcommand");
        render_command(&mut out, sub, &format!("kiln {name}"), 2);
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Subcommands to document: all but hidden ones and clap's generated `help`.
fn documented_subcommands(command: &Command) -> impl Iterator<Item = &Command> {
    command.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// One command: heading, description, usage, arguments, options, after-help text, then its
/// own subcommands one heading level down.
fn render_command(out: &mut String, command: &mut Command, full_name: &str, level: usize) {
    let _ = write!(out, "{} `{full_name}`\n\n", "#".repeat(level));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = write!(out, "{}\n\n", sentence(&about.to_string()));
    }
    let _ = write!(out, "```text\n{}\n```\n\n", usage(command));

    let own = |a: &&Arg| !a.is_global_set() && !a.is_hide_set() && !is_generated(a);
    let positionals: Vec<&Arg> = command.get_arguments().filter(own).filter(|a| a.is_positional()).collect();
    let options: Vec<&Arg> = command.get_arguments().filter(own).filter(|a| !a.is_positional()).collect();
    if !positionals.is_empty() {
        out.push_str("Arguments:\n\n");
        for arg in positionals {
            render_arg(out, arg);
        }
        out.push('\n');
    }
    if !options.is_empty() {
        out.push_str("Options:\n\n");
        for arg in options {
            render_arg(out, arg);
        }
        out.push('\n');
    }
    if let Some(after) = command.get_after_long_help().or(command.get_after_help()) {
        let _ = write!(out, "```text\n{}\n```\n\n", after.to_string().trim_end());
    }

    let names: Vec<String> = documented_subcommands(command).map(|c| c.get_name().to_string()).collect();
    for name in names {
        let sub = command.find_subcommand_mut(&name).expect("listed subcommand");
        render_command(out, sub, &format!("{full_name} {name}"), level + 1);
    }
}

/// clap's own `--help` and `--version`, documented once in the introduction.
fn is_generated(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version)
}

/// The usage line clap prints, without its `Usage: ` label.
fn usage(command: &mut Command) -> String {
    let text = command.render_usage().to_string();
    text.trim().trim_start_matches("Usage:").trim().to_string()
}

/// One argument as a list item: how it is written, then its help, whether it repeats, its
/// possible values and its default.
fn render_arg(out: &mut String, arg: &Arg) {
    let mut notes = Vec::new();
    let takes_values = arg.get_action().takes_values();
    if arg.is_required_set() && !arg.is_positional() {
        notes.push("required".to_string());
    }
    let help = arg.get_long_help().or(arg.get_help()).map(|h| sentence(&h.to_string())).unwrap_or_default();
    let repeats = matches!(arg.get_action(), ArgAction::Append | ArgAction::Count) && !arg.is_positional();
    if let Some(delimiter) = arg.get_value_delimiter() {
        notes.push(format!("values separated by `{delimiter}`"));
    } else if repeats && !help.contains("repeatable") {
        notes.push("repeatable".to_string());
    }
    if takes_values && !arg.is_hide_possible_values_set() {
        let values: Vec<String> =
            arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
        if !values.is_empty() {
            notes.push(format!("one of {}", values.join(", ")));
        }
    }
    if takes_values && !arg.is_hide_default_value_set() && !arg.get_default_values().is_empty() {
        let defaults: Vec<String> =
            arg.get_default_values().iter().map(|v| format!("`{}`", v.to_string_lossy())).collect();
        notes.push(format!("default {}", defaults.join(", ")));
    }

    let _ = write!(out, "- `{}`", spelling(arg));
    if !help.is_empty() {
        // Continuation lines of a multi-paragraph help stay inside the list item.
        let _ = write!(out, ": {}", help.replace("\n\n", "\n\n  "));
    }
    if !notes.is_empty() {
        let _ = write!(out, "{}{}.", if help.is_empty() { ": " } else { " " }, capitalized(&notes.join("; ")));
    }
    out.push('\n');
}

/// How an argument is written: `-o, --output <ENGINE>`, `--fp16`, `<MODEL>`.
fn spelling(arg: &Arg) -> String {
    let values = || -> String {
        let names: Vec<String> = match arg.get_value_names() {
            Some(names) => names.iter().map(|n| n.to_string()).collect(),
            None => vec![arg.get_id().as_str().to_ascii_uppercase()],
        };
        names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" ")
    };
    if arg.is_positional() {
        return values();
    }
    let mut text = String::new();
    if let Some(short) = arg.get_short() {
        text.push_str(&format!("-{short}"));
        if arg.get_long().is_some() {
            text.push_str(", ");
        }
    }
    if let Some(long) = arg.get_long() {
        text.push_str(&format!("--{long}"));
    }
    if arg.get_action().takes_values() {
        text.push(' ');
        text.push_str(&values());
    }
    text
}

/// `text` trimmed, ending with a full stop unless it ends with other punctuation (clap drops
/// the full stop of a one-paragraph doc comment).
fn sentence(text: &str) -> String {
    let text = text.trim();
    match text.chars().last() {
        Some(c) if c.is_alphanumeric() || matches!(c, ')' | '`' | ']' | '\'' | '"') => format!("{text}."),
        _ => text.to_string(),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// GitHub's heading anchor: lower case, spaces to `-`, punctuation but `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/cli.md` is what [`render`] makes of the current flags; with
    /// `KILN_UPDATE_DOCS=1` the test rewrites the file instead.
    #[test]
    fn cli_reference_matches_docs() {
        let rendered = format!("{}\n", render());
        let path = reference_path();
        if std::env::var_os("KILN_UPDATE_DOCS").is_some_and(|v| v != "0") {
            std::fs::write(&path, &rendered).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            eprintln!("rewrote {}", path.display());
            return;
        }
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != rendered {
            let first = current.lines().zip(rendered.lines()).position(|(a, b)| a != b);
            let line = first.unwrap_or(current.lines().count().min(rendered.lines().count()));
            panic!(
                "docs/cli.md is out of date with the clap definitions (first difference at line {}:\n  \
                 file:     {:?}\n  rendered: {:?}).\nRegenerate it with:\n  {REGENERATE}",
                line + 1,
                current.lines().nth(line).unwrap_or("<end of file>"),
                rendered.lines().nth(line).unwrap_or("<end of file>"),
            );
        }
    }

    #[test]
    fn cli_reference_documents_every_command_and_flag() {
        let text = render();
        let mut root = crate::Cli::command();
        root.build();
        fn walk(command: &Command, name: &str, text: &str) {
            for arg in command.get_arguments().filter(|a| !a.is_hide_set() && !is_generated(a)) {
                assert!(text.contains(&format!("`{}", spelling(arg))), "`{name}`: {} is not documented", spelling(arg));
            }
            for sub in documented_subcommands(command) {
                let full = format!("{name} {}", sub.get_name());
                assert!(text.contains(&format!("`{full}`")), "{full} has no section");
                walk(sub, &full, text);
            }
        }
        walk(&root, "kiln", &text);
    }

    #[test]
    fn cli_reference_anchors_follow_github() {
        assert_eq!(anchor("kiln cache merge"), "kiln-cache-merge");
        assert_eq!(anchor("`kiln run`"), "kiln-run");
    }
}
