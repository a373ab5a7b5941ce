//! The builtin tools, one file each.

use std::sync::Arc;

use nanobot_runtime::config::ToolsConfig;

use crate::registry::{RegistryError, Tool};

pub mod apply_patch;
pub mod cron;
pub mod documents;
pub mod edit_file;
pub mod exec;
pub mod exec_guard;
pub mod exec_sandbox;
pub mod exec_session;
pub mod exec_session_tool;
pub mod exec_shell;
pub mod exec_url;
pub mod find_files;
pub mod grep;
pub mod list_dir;
pub mod read_file;
pub mod search;
pub mod shell_split;
pub mod write_file;

/// Returns the builtin tools enabled by `cfg` (`tools.file.enable`, `tools.exec.enable`,
/// `tools.web.enable`); `exec`, `exec_session` and `list_exec_sessions` share `sessions`.
pub fn builtin(
    cfg: &ToolsConfig,
    sessions: &Arc<exec_session::ExecSessions>,
) -> Result<Vec<Arc<dyn Tool>>, RegistryError> {
    let file_enabled = cfg
        .extra
        .get("file")
        .and_then(|f| f.get("enable"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(true);
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    if file_enabled {
        tools.push(Arc::new(read_file::ReadFile::new(
            nanobot_runtime::skills_dir::builtin_skills_dir(),
        )));
        tools.push(Arc::new(write_file::WriteFile));
        tools.push(Arc::new(edit_file::EditFile));
        tools.push(Arc::new(apply_patch::ApplyPatch));
        tools.push(Arc::new(list_dir::ListDir));
        tools.push(Arc::new(find_files::FindFiles));
        tools.push(Arc::new(grep::Grep));
    }
    if cfg.exec.enable {
        let whitelist = cfg.ssrf_whitelist();
        tools.push(Arc::new(
            exec::Exec::new(&cfg.exec)?
                .with_ssrf_whitelist(whitelist)
                .with_sessions(sessions.clone()),
        ));
        tools.push(Arc::new(exec_session_tool::ExecSessionTool::new(
            sessions.clone(),
        )));
        tools.push(Arc::new(exec_session_tool::ListExecSessions::new(
            sessions.clone(),
        )));
    }
    tools.extend(crate::web::tools(cfg)?);
    Ok(tools)
}
