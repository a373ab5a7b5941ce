//! Bearer authentication with `api.apiKey`, as upstream.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use super::error::ApiError;

/// Checks the `Authorization: Bearer <key>` header against `api_key`; an empty key disables
/// authentication. As upstream, a header that is absent or does not start with `Bearer ` is
/// "missing" (it tells the client the expected form); only a wrong key is "invalid".
pub(crate) fn check(headers: &HeaderMap, api_key: &str) -> Result<(), ApiError> {
    if api_key.is_empty() {
        return Ok(());
    }
    let Some(token) = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
    else {
        return Err(ApiError::MissingAuth);
    };
    if constant_time_eq(token, api_key.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::InvalidKey)
    }
}

/// Compares without returning early on the first difference, so the timing reveals at most
/// the length of the expected key.
pub(crate) fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!*e);
        diff |= g ^ e;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn bearer_key_is_required_only_when_configured() {
        assert!(check(&HeaderMap::new(), "").is_ok());
        assert!(matches!(
            check(&HeaderMap::new(), "k"),
            Err(ApiError::MissingAuth)
        ));
        assert!(check(&with_auth("Bearer k"), "k").is_ok());
        assert!(matches!(
            check(&with_auth("Bearer x"), "k"),
            Err(ApiError::InvalidKey)
        ));
        assert!(matches!(
            check(&with_auth("k"), "k"),
            Err(ApiError::MissingAuth)
        ));
        assert!(matches!(
            check(&with_auth("Basic k"), "k"),
            Err(ApiError::MissingAuth)
        ));
        assert!(matches!(
            check(&with_auth("Bearer kk"), "k"),
            Err(ApiError::InvalidKey)
        ));
        assert!(matches!(
            check(&with_auth("Bearer "), "k"),
            Err(ApiError::InvalidKey)
        ));
    }

    #[test]
    fn comparison_needs_every_byte() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secre", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }
}
