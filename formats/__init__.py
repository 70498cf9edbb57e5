"""formats/: pure, versioned, checksummed codecs; bytes in, bytes out, no I/O."""
