//! Validation of user-supplied name parts, so that a model name can never
//! point outside the cache directory.
//!
//! Names are used as directory and file names under `models/`, and the
//! server passes names straight from HTTP requests. So a name part is
//! accepted only if it is a plain, portable file name: ASCII letters,
//! digits, `.`, `-` and `_`, not starting with `.` or `-`, no `..`.

use crate::error::HubError;

/// Longest accepted name part (the Hub's own limit is 96).
const MAX_PART_LEN: usize = 96;
/// Most `/`-separated parts of a file path inside a repository.
const MAX_FILE_DEPTH: usize = 4;

/// Checks one path component; `whole` is the full name, for the message.
pub(crate) fn check_part(part: &str, whole: &str) -> Result<(), HubError> {
    let bad = |reason: &str| HubError::InvalidName { name: whole.to_string(), reason: reason.to_string() };
    if part.is_empty() {
        return Err(bad("empty name part"));
    }
    if part.len() > MAX_PART_LEN {
        return Err(bad("name part longer than 96 characters"));
    }
    if let Some(c) = part.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))) {
        return Err(bad(&format!("character {c:?} is not allowed")));
    }
    if part.starts_with('.') || part.starts_with('-') {
        return Err(bad("a name part may not start with '.' or '-'"));
    }
    if part.contains("..") {
        return Err(bad("'..' is not allowed"));
    }
    Ok(())
}

/// Checks a repository id: `name` or `org/name`.
pub(crate) fn check_repo(repo: &str, whole: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return Err(HubError::InvalidName {
            name: whole.to_string(),
            reason: "a repository is `org/name`".to_string(),
        });
    }
    parts.iter().try_for_each(|p| {
        check_part(p, whole)?;
        if p.contains("--") {
            // The Hub forbids it too; the cache uses `--` to join org and name.
            return Err(HubError::InvalidName {
                name: whole.to_string(),
                reason: "'--' is not allowed in a repository name".to_string(),
            });
        }
        Ok(())
    })
}

/// Checks a file path inside a repository: `a.gguf` or `sub/dir/a.gguf`.
pub(crate) fn check_repo_file(file: &str, whole: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = file.split('/').collect();
    if parts.len() > MAX_FILE_DEPTH {
        return Err(HubError::InvalidName { name: whole.to_string(), reason: "file path nested too deep".to_string() });
    }
    parts.iter().try_for_each(|p| check_part(p, whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_parts_pass() {
        for ok in ["smollm2", "SmolLM2-135M", "a.b_c-d", "Q4_1.gguf", "x"] {
            assert!(check_part(ok, ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn hostile_parts_fail() {
        let long = "a".repeat(97);
        for bad in [
            "", ".", "..", "...", ".hidden", "-rf", "a/b", "a\\b", "/abs", "a..b", "a b", "a\0b", "C:", "naïve", "a~",
            "$HOME", &long,
        ] {
            assert!(check_part(bad, bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn repos_and_files() {
        assert!(check_repo("org/name", "x").is_ok());
        assert!(check_repo("gpt2", "x").is_ok());
        assert!(check_repo("a/b/c", "x").is_err());
        assert!(check_repo("org/", "x").is_err());
        assert!(check_repo("/name", "x").is_err());
        assert!(check_repo("../name", "x").is_err());
        assert!(check_repo("org--x/name", "x").is_err());
        assert!(check_repo_file("sub/m.gguf", "x").is_ok());
        assert!(check_repo_file("../m.gguf", "x").is_err());
        assert!(check_repo_file("/etc/passwd", "x").is_err());
        assert!(check_repo_file("a/b/c/d/e.gguf", "x").is_err());
        assert!(check_repo_file("a//b.gguf", "x").is_err());
    }
}
