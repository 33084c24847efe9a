// The helpers shared with StrataTests (Tests/StrataTestSupport), visible in every file.
@_exported import StrataTestSupport
