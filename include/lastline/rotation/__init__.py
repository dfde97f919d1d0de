"""key_rotation: every kept backup's envelope (and each binlog archive branch's) re-wrapped under the deployment's
current encryption key and recipients (storage.envelope.rewrap). Only manifests and chains are written, signed again
byte for byte as they were apart from the envelope and the MAC; no data object is ever rewritten."""
