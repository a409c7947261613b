//! Fuzzes the decoding of stored application fields (the tail of a
//! connection index entry's value, `AppFields::decode`) and the name keys: any
//! bytes give fields or `None`, never a panic; fields that decode encode to
//! bytes that decode to the same fields; a name's key turns back into the name
//! lowercased. `cargo +nightly fuzz run -O app_fields`.

#![no_main]

use hindsight_model::AppFields;
use hindsight_model::app::NameKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(fields) = AppFields::decode(data) {
        let mut bytes = Vec::new();
        fields.encode(&mut bytes);
        assert_eq!(AppFields::decode(&bytes).as_ref(), Some(&fields));
    }
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Some(kind) = NameKind::from_code(which % 8) else {
        return;
    };
    let name = String::from_utf8_lossy(rest);
    if let Some(key) = kind.key(&name) {
        assert_eq!(kind.name_of_key(&key), name.to_ascii_lowercase());
    }
});
