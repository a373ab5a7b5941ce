//! Who may talk to a bot through a chat channel, as upstream's `BaseChannel.is_allowed`:
//! `"*"` allows everyone, an exact entry allows that sender, an approved pairing allows it,
//! anything else is denied. An empty `allowFrom` denies everyone.

/// Returns whether `allow_from` (without pairing) lets `sender_id` in. Telegram sender ids are
/// `"{id}|{username}"`; an entry may name the id, the username, or both (upstream's legacy
/// matching: exactly one `|` and a numeric id).
pub fn allowed_by_list(allow_from: &[String], sender_id: &str) -> bool {
    if allow_from.iter().any(|a| a == "*" || a == sender_id) {
        return true;
    }
    let Some((id, username)) = split_sender(sender_id) else {
        return false;
    };
    allow_from.iter().any(|entry| {
        let entry = entry.trim_start_matches('@');
        entry == id || (!username.is_empty() && entry.eq_ignore_ascii_case(username))
    })
}

/// Splits `"{id}|{username}"` (or a bare numeric id) into its parts.
fn split_sender(sender_id: &str) -> Option<(&str, &str)> {
    let (id, username) = match sender_id.split_once('|') {
        Some((id, username)) if !username.contains('|') => (id, username),
        Some(_) => return None,
        None => (sender_id, ""),
    };
    let numeric = !id.is_empty()
        && id
            .trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit());
    numeric.then_some((id, username))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allow_lists_match_ids_usernames_or_both_and_empty_denies_everyone() {
        assert!(!allowed_by_list(&[], "42|alice"), "empty denies");
        assert!(allowed_by_list(&list(&["*"]), "42|alice"));
        assert!(allowed_by_list(&list(&["42"]), "42|alice"));
        assert!(allowed_by_list(&list(&["alice"]), "42|alice"));
        assert!(allowed_by_list(&list(&["@Alice"]), "42|alice"));
        assert!(allowed_by_list(&list(&["42|alice"]), "42|alice"));
        assert!(allowed_by_list(&list(&["42"]), "42"));
        assert!(!allowed_by_list(&list(&["43", "bob"]), "42|alice"));
        assert!(
            !allowed_by_list(&list(&["alice"]), "42"),
            "no username, no match"
        );
        assert!(
            !allowed_by_list(&list(&["a"]), "x|a"),
            "non-numeric ids never match parts"
        );
        assert!(
            !allowed_by_list(&list(&["b"]), "1|a|b"),
            "two | never match parts"
        );
    }
}
