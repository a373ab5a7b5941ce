//! Tool names as both sides of a tool call show them: the order upstream registers tools in
//! (its loader registers the builtins sorted by tool class name, then the MCP tools) and the
//! error for a name nobody serves, which lists them in that order.

/// Returns the key tool names sort by: builtins first, by the name of upstream's tool class
/// (`exec_session` → `ExecSessionTool` before `exec` → `ExecTool`), then `mcp_*` by name.
pub fn registration_key(name: &str) -> (bool, String) {
    if name.starts_with("mcp_") {
        return (true, name.to_string());
    }
    (false, class_name(name))
}

/// Sorts `names` into [`registration_key`] order.
pub fn sort<S: AsRef<str>>(names: &mut [S]) {
    names.sort_by_cached_key(|n| registration_key(n.as_ref()));
}

/// Returns upstream's class name of a builtin tool: CamelCase of its name plus `Tool`, except
/// where upstream named the class otherwise.
fn class_name(name: &str) -> String {
    if name == "run_cli_app" {
        return "CliAppsTool".to_string();
    }
    let mut class = String::with_capacity(name.len() + 4);
    for part in name.split('_') {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            class.extend(first.to_uppercase());
            class.push_str(chars.as_str());
        }
    }
    class.push_str("Tool");
    class
}

/// Returns upstream's error for a tool name nobody serves (`available` in registration
/// order), with a hint when exactly one name matches once lowercased and stripped of
/// non-alphanumerics.
pub fn unknown_tool_error(name: &str, available: &[&str]) -> String {
    fn norm(s: &str) -> String {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    }
    let wanted = norm(name);
    let close: Vec<&&str> = if wanted.is_empty() {
        Vec::new()
    } else {
        available.iter().filter(|a| norm(a) == wanted).collect()
    };
    let hint = match close.as_slice() {
        [only] => format!(" Did you mean '{only}'? Tool names must match exactly."),
        _ => String::new(),
    };
    format!(
        "Error: Tool '{name}' not found.{hint} Available: {}",
        available.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_upstreams_loader_registers_them() {
        // nanobot 0.3.5's `ToolLoader().load(...)` with every tool enabled.
        let upstream = [
            "apply_patch",
            "run_cli_app",
            "create_goal",
            "cron",
            "edit_file",
            "exec_session",
            "exec",
            "find_files",
            "grep",
            "list_dir",
            "list_exec_sessions",
            "list_sessions",
            "message",
            "my",
            "read_file",
            "read_session",
            "search_sessions",
            "send_session_message",
            "spawn",
            "update_goal",
            "web_fetch",
            "web_search",
            "write_file",
        ];
        let mut names: Vec<&str> = upstream.iter().rev().copied().collect();
        names.push("mcp_笔记_搜索");
        names.push("mcp_a_b");
        sort(&mut names);
        assert_eq!(&names[..upstream.len()], upstream);
        assert_eq!(&names[upstream.len()..], ["mcp_a_b", "mcp_笔记_搜索"]);
    }

    #[test]
    fn an_unknown_name_gets_upstreams_error_with_a_hint_when_one_name_is_close() {
        let tools = ["edit_file", "exec", "read_file"];
        assert_eq!(
            unknown_tool_error("ReadFile", &tools),
            "Error: Tool 'ReadFile' not found. Did you mean 'read_file'? Tool names must match \
             exactly. Available: edit_file, exec, read_file"
        );
        assert_eq!(
            unknown_tool_error("笔记 📔", &tools),
            "Error: Tool '笔记 📔' not found. Available: edit_file, exec, read_file"
        );
        assert_eq!(
            unknown_tool_error("👩‍👩‍👧‍👦", &tools),
            "Error: Tool '👩‍👩‍👧‍👦' not found. Available: edit_file, exec, read_file"
        );
    }
}
