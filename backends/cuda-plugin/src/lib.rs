//! kiln's cuda backend as a shared library (`libkiln_backend_cuda.so`): the `kiln` binary loads
//! it from its own folder or KILN_PLUGIN_PATH (see `kiln_plugins::backend` for the handshake).

kiln_plugins::export_backend!(c"cuda", kiln_cuda::CudaBackend::new());
