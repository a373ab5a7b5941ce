//! Delivery across replicas: one poller per token, takeover without loss or doubles, a crash
//! mid-delivery, several bots in one fleet.
