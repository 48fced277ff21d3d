//! The reply of every `... HELP` subcommand.

use super::spec::Ctx;

/// The reply of every `... HELP` subcommand, shaped as Redis's.
pub fn write_help(ctx: &mut Ctx<'_>, container: &str, lines: &[&str]) {
    ctx.out.array(lines.len() + 3);
    ctx.out.simple(&format!(
        "{container} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for line in lines {
        ctx.out.simple(line);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Print this help.");
}
