"""Developer conveniences: the embedded broker and sample data."""
