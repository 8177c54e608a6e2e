//! Aliases (`ollama cp`, `ollama create`): stored in the cache, listed next
//! to their model, flattened when an alias is copied, refused for models
//! that are not cached.

mod support;

use std::fs;

use kiln_hub::{Alias, Cache, HubError, ModelRef};
use serde_json::json;

fn cache_with_smollm2() -> (tempfile::TempDir, Cache) {
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path());
    let path = cache.model_path(&ModelRef::parse_name("smollm2").unwrap());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, support::tiny_gguf()).unwrap();
    (root, cache)
}

#[test]
fn aliases_are_listed_with_their_model() {
    let (_root, cache) = cache_with_smollm2();
    let params = json!({"temperature": 0.2}).as_object().unwrap().clone();
    let a = Alias {
        from: "smollm2:latest".into(),
        system: Some("Arr.".into()),
        template: None,
        parameters: params,
        adapter: None,
    };
    let stored = cache.set_alias("pirate:latest", a).unwrap();
    assert_eq!(stored.from, "smollm2");
    assert_eq!(cache.alias("pirate").unwrap().unwrap(), stored);
    let list = cache.list().unwrap();
    let names: Vec<(&str, Option<&str>)> = list.iter().map(|m| (m.name.as_str(), m.alias_of.as_deref())).collect();
    assert_eq!(names, [("pirate", Some("smollm2")), ("smollm2", None)]);
    assert_eq!(list[0].path, list[1].path);
    assert_eq!(list[0].size_bytes, list[1].size_bytes);
}

#[test]
fn copying_an_alias_copies_its_definition() {
    let (_root, cache) = cache_with_smollm2();
    let params = json!({"temperature": 0.2, "top_k": 5}).as_object().unwrap().clone();
    cache
        .set_alias(
            "a",
            Alias {
                from: "smollm2".into(),
                system: Some("S".into()),
                template: Some("T".into()),
                parameters: params,
                adapter: None,
            },
        )
        .unwrap();
    let more = json!({"top_k": 7}).as_object().unwrap().clone();
    let b = cache
        .set_alias("b", Alias { from: "a".into(), system: None, template: None, parameters: more, adapter: None })
        .unwrap();
    assert_eq!(b.from, "smollm2");
    assert_eq!(b.system.as_deref(), Some("S"));
    assert_eq!(b.template.as_deref(), Some("T"));
    assert_eq!(json!(b.parameters), json!({"temperature": 0.2, "top_k": 7}));
    assert!(cache.remove_alias("a").unwrap());
    assert!(!cache.remove_alias("a").unwrap());
    assert!(cache.alias("b").unwrap().is_some(), "b does not depend on a");
}

#[test]
fn bad_aliases_are_refused_and_change_nothing() {
    let (root, cache) = cache_with_smollm2();
    let to = |from: &str| Alias { from: from.into(), ..Alias::default() };
    assert!(matches!(cache.set_alias("x", to("gemma3-270m")), Err(HubError::NotCached { .. })));
    assert!(matches!(cache.set_alias("x", to("nope")), Err(HubError::UnknownModel(_))));
    assert!(matches!(cache.set_alias("x", to("../etc")), Err(HubError::InvalidName { .. })));
    assert!(matches!(cache.set_alias("smollm2", to("smollm2")), Err(HubError::InvalidName { .. })));
    assert!(matches!(cache.set_alias("a/b", to("smollm2")), Err(HubError::InvalidName { .. })));
    assert!(cache.aliases().unwrap().is_empty());
    assert!(!root.path().join("aliases.json").exists());
}

#[test]
fn an_alias_of_a_removed_model_is_not_listed() {
    let (_root, cache) = cache_with_smollm2();
    cache.set_alias("p", Alias { from: "smollm2".into(), ..Alias::default() }).unwrap();
    assert!(cache.remove(&ModelRef::parse_name("smollm2").unwrap()).unwrap());
    assert!(cache.list().unwrap().is_empty());
    assert!(cache.alias("p").unwrap().is_some());
}

#[test]
fn concurrent_changes_are_all_kept() {
    let (_root, cache) = cache_with_smollm2();
    std::thread::scope(|s| {
        for i in 0..8 {
            let cache = &cache;
            s.spawn(move || cache.set_alias(&format!("a{i}"), Alias { from: "smollm2".into(), ..Alias::default() }));
        }
    });
    assert_eq!(cache.aliases().unwrap().len(), 8);
}

#[test]
fn an_adapter_is_shared_by_copies_and_removed_with_the_last() {
    let (root, cache) = cache_with_smollm2();
    let dir = root.path().join("peft");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("adapter_config.json"), "{\"r\": 2}").unwrap();
    assert!(cache.import_adapter(&dir).unwrap_err().to_string().contains("adapter_model.safetensors"));
    fs::write(dir.join("adapter_model.safetensors"), "weights").unwrap();
    let adapter = cache.import_adapter(&dir).unwrap();
    assert_eq!(adapter.files.len(), 2);
    let path = cache.assemble_adapter(&adapter).unwrap();
    assert_eq!(fs::read_to_string(path.join("adapter_model.safetensors")).unwrap(), "weights");
    let a = Alias { from: "smollm2".into(), adapter: Some(adapter.clone()), ..Alias::default() };
    cache.set_alias("a", a).unwrap();
    let b = cache.set_alias("b", Alias { from: "a".into(), ..Alias::default() }).unwrap();
    assert_eq!(b.adapter.as_ref(), Some(&adapter), "a copy keeps the adapter");
    assert!(cache.remove_alias("a").unwrap());
    assert!(path.is_dir(), "b still uses it");
    assert!(cache.remove_alias("b").unwrap());
    assert!(!path.exists());
    assert!(adapter.files.values().all(|d| !cache.has_blob(d)), "its blobs went with it");

    let gguf = root.path().join("lora.gguf");
    fs::write(&gguf, "GGUF").unwrap();
    let g = cache.import_adapter(&gguf).unwrap();
    assert!(cache.assemble_adapter(&g).unwrap().ends_with("lora.gguf"));
    assert!(cache.import_adapter(&root.path().join("nope")).is_err());
    assert!(cache.import_adapter(&dir.join("adapter_config.json")).unwrap_err().to_string().contains(".gguf"));
}
