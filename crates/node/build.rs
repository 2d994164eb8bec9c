//! Links the add-on as Node loads it (napi-rs' setup: undefined N-API
//! symbols resolved by the node binary at load time).

fn main() {
    napi_build::setup();
}
