package dev.lockbroker.client;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * An {@link SSLContext} from PEM files, as {@code LOCKBROKER_CA_FILE},
 * {@code LOCKBROKER_CLIENT_CERT} and {@code LOCKBROKER_CLIENT_KEY} name them:
 * the CAs to trust (else the JDK's own trust store) and a client certificate
 * chain with its key for mutual TLS (else none). The files are read into
 * in-memory key stores; nothing is written to disk.
 */
public final class Tls {
    private static final char[] NO_PASSWORD = new char[0];

    private Tls() {
    }

    /**
     * @param caFile PEM certificates to trust instead of the JDK's defaults, or null
     * @param certFile the client's PEM certificate chain (its own first), or null
     * @param keyFile the client certificate's PEM private key (PKCS#8, or PKCS#1 RSA), or null
     * @return a TLS context for {@link LockbrokerClient.Builder#sslContext}
     * @throws IllegalArgumentException a file cannot be read or is not what it should be,
     *     or only one of {@code certFile} and {@code keyFile} is given
     */
    public static SSLContext context(Path caFile, Path certFile, Path keyFile) {
        if ((certFile == null) != (keyFile == null)) {
            throw new IllegalArgumentException("a client certificate needs both its certificate and its key file");
        }
        try {
            TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            if (caFile != null) {
                KeyStore roots = emptyStore();
                int n = 0;
                for (Certificate cert : certificates(caFile)) {
                    roots.setCertificateEntry("ca-" + n++, cert);
                }
                trust.init(roots);
            } else {
                trust.init((KeyStore) null);
            }
            KeyManagerFactory keys = null;
            if (certFile != null) {
                List<Certificate> chain = certificates(certFile);
                PrivateKey key = Pem.privateKey(keyFile);
                KeyStore store = emptyStore();
                store.setKeyEntry("client", key, NO_PASSWORD, chain.toArray(new Certificate[0]));
                keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                keys.init(store, NO_PASSWORD);
            }
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(keys == null ? null : keys.getKeyManagers(), trust.getTrustManagers(), null);
            return context;
        } catch (IOException e) {
            throw new IllegalArgumentException("cannot read a TLS file: " + e.getMessage(), e);
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("cannot load the TLS files: " + e.getMessage(), e);
        }
    }

    private static KeyStore emptyStore() throws GeneralSecurityException, IOException {
        KeyStore store = KeyStore.getInstance("PKCS12");
        store.load(null, null);
        return store;
    }

    private static List<Certificate> certificates(Path file) throws IOException, GeneralSecurityException {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        List<Certificate> certs = new ArrayList<>();
        for (Pem.Block block : Pem.blocks(Files.readString(file, StandardCharsets.US_ASCII))) {
            if (block.label.equals("CERTIFICATE")) {
                certs.add(factory.generateCertificate(new ByteArrayInputStream(block.der)));
            }
        }
        if (certs.isEmpty()) {
            throw new IllegalArgumentException(file + " holds no PEM certificate");
        }
        return certs;
    }
}
