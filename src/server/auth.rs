//! Who a request on the metrics port or the rate limit service is: the
//! ACL user its `Authorization` header (or gRPC `authorization` metadata)
//! logs in as. Shared by `http.rs` and `rls.rs`, checked per request.

use std::sync::Arc;

use crate::acl::UserCell;
use crate::state::State;

/// The user an `Authorization` header logs in as, the metrics port's and
/// the rate limit service's alike: HTTP Basic's `user:password` (a name
/// no user has stands for `default`, as any name did before there were
/// users), or a bearer token, `default`'s password. `None` if the
/// header is malformed, the user is off, or the password is not its.
pub fn authenticate(state: &State, header: &[u8]) -> Option<Arc<UserCell>> {
    let (user, password) = credentials(header)?;
    let acl = &state.acl;
    match user {
        Some(name) if acl.get(&name).is_some() => acl.authenticate(&name, &password),
        _ => acl.authenticate(b"default", &password),
    }
}

/// The credentials a request gives: HTTP Basic's user name and password,
/// or a bearer token (a password, no user name).
fn credentials(value: &[u8]) -> Option<(Option<Vec<u8>>, Vec<u8>)> {
    use base64::Engine;
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = (&value[..space], value[space..].trim_ascii());
    if scheme.eq_ignore_ascii_case(b"basic") {
        let pair = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = pair.iter().position(|&b| b == b':')?;
        Some((Some(pair[..colon].to_vec()), pair[colon + 1..].to_vec()))
    } else if scheme.eq_ignore_ascii_case(b"bearer") {
        Some((None, rest.to_vec()))
    } else {
        None
    }
}
