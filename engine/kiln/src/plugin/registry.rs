//! The process-wide plugin registry (TensorRT's getPluginRegistry()): creators keyed by
//! `namespace::name@version`, and the instances made from a layer's fields, cached so
//! inference and execution do not recreate a plugin per call.

use super::{LayerPlugin, PluginCreator, PluginError, PluginKey};
use crate::ir::layer::PluginParams;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

#[derive(Debug, Default)]
pub struct PluginRegistry {
    creators: RwLock<BTreeMap<PluginKey, Arc<dyn PluginCreator>>>,
    instances: Mutex<Vec<(PluginParams, Arc<dyn LayerPlugin>)>>,
}

/// The registry of this process.
pub fn registry() -> &'static PluginRegistry {
    static REGISTRY: OnceLock<PluginRegistry> = OnceLock::new();
    REGISTRY.get_or_init(PluginRegistry::default)
}

impl PluginRegistry {
    /// Registers creators all or nothing: a key already registered (or repeated in
    /// `creators`) refuses the whole set, so loading a library is never partial.
    pub fn register_all(&self, creators: Vec<Arc<dyn PluginCreator>>) -> Result<(), PluginError> {
        let mut map = self.creators.write().unwrap_or_else(PoisonError::into_inner);
        let mut seen = Vec::new();
        for c in &creators {
            let key = c.key();
            if map.contains_key(&key) || seen.contains(&key) {
                return Err(PluginError::Duplicate(key.to_string()));
            }
            seen.push(key);
        }
        for c in creators {
            map.insert(c.key(), c);
        }
        Ok(())
    }

    pub fn register(&self, creator: Arc<dyn PluginCreator>) -> Result<(), PluginError> {
        self.register_all(vec![creator])
    }

    /// Removes a creator (and the instances it made); true when it was registered.
    pub fn deregister(&self, key: &PluginKey) -> bool {
        let removed = self.creators.write().unwrap_or_else(PoisonError::into_inner).remove(key).is_some();
        self.instances.lock().unwrap_or_else(PoisonError::into_inner).retain(|(p, _)| &PluginKey::of(p) != key);
        removed
    }

    pub fn creator(&self, key: &PluginKey) -> Option<Arc<dyn PluginCreator>> {
        self.creators.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    /// Every registered creator, in key order.
    pub fn creators(&self) -> Vec<Arc<dyn PluginCreator>> {
        self.creators.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// The creator for an ONNX node of `op_type` in `domain`: the one registered with
    /// that namespace and name; of several versions, `version` if given, else the highest.
    pub fn find(&self, namespace: &str, name: &str, version: Option<&str>) -> Option<Arc<dyn PluginCreator>> {
        let map = self.creators.read().unwrap_or_else(PoisonError::into_inner);
        let mut matching = map.iter().filter(|(k, _)| k.namespace == namespace && k.name == name);
        match version {
            Some(v) => matching.find(|(k, _)| k.version == v).map(|(_, c)| c.clone()),
            None => matching.max_by(|(a, _), (b, _)| natural_order(&a.version, &b.version)).map(|(_, c)| c.clone()),
        }
    }

    /// The instance for a Plugin layer's parameters, created once per distinct fields.
    pub fn instance(&self, params: &PluginParams) -> Result<Arc<dyn LayerPlugin>, PluginError> {
        let mut cache = self.instances.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, p)) = cache.iter().find(|(p, _)| p == params) {
            return Ok(p.clone());
        }
        let key = PluginKey::of(params);
        let creator = self.creator(&key).ok_or_else(|| PluginError::NotRegistered(key.to_string()))?;
        let plugin = creator.create(&params.fields)?;
        if plugin.num_outputs() != params.num_outputs {
            return Err(PluginError::Inconsistent {
                plugin: key.to_string(),
                message: format!(
                    "the layer has {} outputs, the plugin reports {}",
                    params.num_outputs,
                    plugin.num_outputs()
                ),
            });
        }
        cache.push((params.clone(), plugin.clone()));
        Ok(plugin)
    }

    /// The plugins of `keys` that are not registered.
    pub fn missing<'k>(&self, keys: impl IntoIterator<Item = &'k PluginKey>) -> Vec<String> {
        let map = self.creators.read().unwrap_or_else(PoisonError::into_inner);
        keys.into_iter().filter(|k| !map.contains_key(*k)).map(|k| k.to_string()).collect()
    }
}

/// Versions compare by their numeric parts first ("10" after "9"), then as text.
fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    let nums = |s: &str| s.split('.').map(|p| p.parse::<u64>().ok()).collect::<Vec<_>>();
    nums(a).cmp(&nums(b)).then_with(|| a.cmp(b))
}
