//! `aet generate`: the man pages and shell completions made from this CLI's own definition, so
//! that they never disagree with `aet --help` (the Debian package ships them).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory as _;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a man page for aet and for each of its subcommands (`aet.1`, `aet-run.1`,
    /// `aet-ledger-summary.1`, ...) into DIR; prints each file written.
    Man {
        /// The directory to write into (created if missing).
        dir: PathBuf,
    },
    /// Print the completion script for SHELL (bash, zsh, fish, elvish, powershell), or write it
    /// into --dir under the name that shell looks for (`aet.bash`, `_aet`, `aet.fish`, ...).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
        /// Write the script into this directory instead of printing it.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

pub fn run(c: Command) -> anyhow::Result<u8> {
    match c {
        Command::Man { dir } => {
            for page in man_pages(&dir)? {
                println!("{}", page.display());
            }
        }
        Command::Completions { shell, dir: None } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut super::Cli::command(), "aet", &mut out);
            super::print_out(&String::from_utf8_lossy(&out))?;
        }
        Command::Completions {
            shell,
            dir: Some(dir),
        } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
            let path = clap_complete::generate_to(shell, &mut super::Cli::command(), "aet", &dir)
                .with_context(|| {
                format!("writing {shell} completions into {}", dir.display())
            })?;
            println!("{}", path.display());
        }
    }
    Ok(0)
}

/// Writes the man page of `aet` and of every visible subcommand, at every depth, into `dir`;
/// returns the files written, `aet.1` first.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let mut cmd = super::Cli::command();
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, "aet", dir, &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    // The page's title and NAME section carry the full name (`aet-ledger-summary`), as git's
    // pages do; its synopsis the words a user types (`aet ledger summary`).
    // clap keeps names as `&'static str`: a page's name lives as long as this short command.
    let page = cmd
        .clone()
        .name(&*name.to_owned().leak())
        .bin_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.1"));
    let mut text = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut text)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_visible_subcommand_has_a_page_and_no_hidden_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let pages = super::man_pages(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "aet.1");
        for want in [
            "aet-run.1",
            "aet-daemon.1",
            "aet-ledger-summary.1",
            "aet-generate-man.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.contains("__") || n.contains("help")),
            "{names:?}"
        );
        let run = std::fs::read_to_string(dir.path().join("aet-run.1")).unwrap();
        assert!(run.contains(".TH aet-run 1"), "{}", &run[..200]);
        assert!(
            run.contains("\\-\\-standalone"),
            "the options are on the page"
        );
        assert!(run.contains(crate::version::VERSION));
    }

    #[test]
    fn completions_name_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(
                shell,
                &mut <super::super::Cli as clap::CommandFactory>::command(),
                "aet",
                &mut out,
            );
            let text = String::from_utf8(out).unwrap();
            for sub in ["run", "audit", "verify", "daemon"] {
                assert!(text.contains(sub), "{shell}: no {sub}");
            }
        }
    }
}
