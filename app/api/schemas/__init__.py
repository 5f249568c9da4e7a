"""Request and response models of the HTTP API: the OpenAPI document is built from them."""
