"""Qt glue between the widgets and the Qt-free packages (engine, gpu): worker threads and signals."""
