// Generates the TLS test certificates for the local test broker (scripts/broker.sh) and for
// the kafka-consumer TLS tests, into an (empty or new) directory. scripts/broker.sh runs it
// once and caches the result in target/kafka/certs; see the header of broker.sh for what
// each file is for.
//
// Java 17 single-file source program using only the JDK, no build step:
//
//   java --add-exports java.base/sun.security.tools.keytool=ALL-UNNAMED \
//        scripts/java/TestCerts.java OUT_DIR
//
// Certificates are signed by running keytool's commands (genkeypair, certreq, gencert) inside
// this JVM: the JDK has no public API to sign a certificate, and one keytool process per step
// (12 steps) would cost a JVM start each. keytool's entry point lives in a
// non-exported package, hence --add-exports; without it (or should a JDK drop that class)
// each step falls back to running the keytool executable, which is slower but equivalent.
// Private keys are read back with java.security.KeyStore and written as PKCS#8 PEM (encrypted
// with javax.crypto): keytool cannot export private keys, and openssl is not guaranteed to be
// installed.
//
// Prints the files written on stdout; on failure prints the error and exits non-zero.

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import javax.crypto.Cipher;
import javax.crypto.EncryptedPrivateKeyInfo;
import javax.crypto.SecretKey;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.PBEParameterSpec;

public class TestCerts {
    /** Password of client.p12 (store and key) and of the intermediate keystores. */
    static final String STORE_PASS = "kafka-test-pass";
    /** Password of client-encrypted.key. */
    static final String KEY_PASS = "client-key-pass";
    static final String VALIDITY_DAYS = "3650";
    static final String CLIENT_DN = "CN=kafka-consumer-test-client";

    static Path out;
    static Path work;
    static Method keytoolMain;

    public static void main(String[] args) {
        try {
            if (args.length != 1) throw new IllegalArgumentException("usage: TestCerts OUT_DIR");
            long t0 = System.nanoTime();
            out = Paths.get(args[0]).toAbsolutePath();
            work = out.resolve(".work");
            Files.createDirectories(work);
            findKeytool();
            run();
            deleteTree(work);
            System.err.printf("TestCerts: done in %d ms%n", (System.nanoTime() - t0) / 1_000_000);
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("TestCerts: FAILED: " + t);
            t.printStackTrace(System.err);
            System.exit(1);
        }
    }

    static void run() throws Exception {
        // Four RSA key pairs (key generation is most of the run time): the CA the broker and
        // client certificates are signed with, an unrelated CA (for "unknown CA" tests), the
        // broker's and the client's. The wrong-name broker certificate reuses the broker's
        // key and the expired client certificate the client's.
        // Two at a time (keytool instances share no mutable state).
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<Future<?>> keys = new ArrayList<>();
        keys.add(pool.submit(() -> keyPair("ca", "CN=kafka-consumer-test-ca", true)));
        keys.add(pool.submit(() -> keyPair("other-ca", "CN=kafka-consumer-test-other-ca", true)));
        keys.add(pool.submit(() -> keyPair("broker", "CN=kafka-consumer-test-broker", false)));
        keys.add(pool.submit(() -> keyPair("client", CLIENT_DN, false)));
        for (Future<?> f : keys) f.get();
        pool.shutdown();
        X509Certificate ca = selfSignedCert("ca");
        X509Certificate otherCa = selfSignedCert("other-ca");

        // Broker: SAN 127.0.0.1 and localhost, what the listeners are reached as.
        sign("broker", "broker", null, VALIDITY_DAYS,
                "san=ip:127.0.0.1,dns:localhost", "ku:c=digitalSignature,keyEncipherment", "eku=serverAuth");
        // For the SSL_WRONGNAME listener: a valid chain for a name nobody connects to.
        sign("broker", "broker-wrongname", null, VALIDITY_DAYS,
                "san=dns:wrong.example", "ku:c=digitalSignature,keyEncipherment", "eku=serverAuth");
        // mTLS client. The broker's principal for it (default ssl.principal.mapping.rules) is
        // the subject DN as is: User:CN=kafka-consumer-test-client.
        sign("client", "client", null, VALIDITY_DAYS, "ku:c=digitalSignature,keyEncipherment", "eku=clientAuth");
        // The same client, but valid only from 400 to 370 days ago: the broker refuses it.
        sign("client", "expired-client", "-400d", "30", "ku:c=digitalSignature,keyEncipherment", "eku=clientAuth");

        pem("ca.pem", ca);
        pem("other-ca.pem", otherCa);

        // The broker's keystores are PEM (ssl.keystore.type=PEM), not PKCS12: a PKCS12 file
        // costs 100-300 ms of PBKDF2 on every load, and the broker loads one per TLS listener
        // at startup.
        PrivateKey brokerKey = key("broker");
        X509Certificate[] brokerChain = {signedCert("broker"), ca};
        X509Certificate[] wrongNameChain = {signedCert("broker-wrongname"), ca};
        pem("broker.pem", brokerChain);
        write("broker-bundle.pem", keyPem(brokerKey) + pemString(brokerChain));
        write("broker-wrongname-bundle.pem", keyPem(brokerKey) + pemString(wrongNameChain));

        PrivateKey clientKey = key("client");
        X509Certificate[] clientChain = {signedCert("client"), ca};
        pem("client.pem", clientChain);
        write("client.key", keyPem(clientKey));
        write("client-bundle.pem", keyPem(clientKey) + pemString(clientChain));
        write("client-encrypted.key", encryptedKeyPem(clientKey, KEY_PASS));
        pkcs12("client.p12", "client", clientKey, clientChain);

        X509Certificate[] expiredChain = {signedCert("expired-client"), ca};
        pem("expired-client.pem", expiredChain);
        write("expired-client.key", keyPem(clientKey));
        write("expired-client-bundle.pem", keyPem(clientKey) + pemString(expiredChain));

        // When the first of the long-lived certificates expires (epoch seconds), for
        // broker.sh's "regenerate when about to expire" check. Written last: its presence
        // means the set is complete.
        long notAfter = Stream.of(ca, otherCa, brokerChain[0], wrongNameChain[0], clientChain[0])
                .mapToLong(c -> c.getNotAfter().getTime() / 1000).min().getAsLong();
        write("not-after", notAfter + "\n");
    }

    // ---- keytool ----

    static void findKeytool() {
        try {
            Class<?> c = Class.forName("sun.security.tools.keytool.Main");
            Method m = c.getMethod("main", String[].class);
            m.setAccessible(true); // throws unless the package is exported to us
            keytoolMain = m;
        } catch (Throwable t) {
            System.err.println("TestCerts: keytool not usable in-process (" + t
                    + "); running the keytool executable instead (slower)");
        }
    }

    /** Runs keytool with these arguments; a keytool error is an exception. */
    static void keytool(String... args) throws Exception {
        if (keytoolMain != null) {
            try {
                // On an error keytool prints it (stdout) and calls System.exit(1).
                keytoolMain.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                throw new Exception("keytool " + String.join(" ", args), e.getCause());
            }
            return;
        }
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "keytool").toString());
        cmd.addAll(Arrays.asList(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        byte[] text;
        try (InputStream in = p.getInputStream()) {
            text = in.readAllBytes();
        }
        if (p.waitFor() != 0) {
            throw new Exception("keytool " + String.join(" ", args) + " failed: "
                    + new String(text, StandardCharsets.UTF_8));
        }
    }

    // The intermediate keystores are JKS: far cheaper to load and store than PKCS12 (no
    // PBKDF2), and they are only read back by this program.
    static String ks(String name) {
        return work.resolve(name + ".jks").toString();
    }

    /** A key pair NAME with a self-signed certificate (a CA's if ca). */
    static Void keyPair(String name, String dn, boolean ca) throws Exception {
        List<String> args = new ArrayList<>(Arrays.asList("-genkeypair", "-alias", name, "-keyalg", "RSA",
                "-keysize", "2048", "-dname", dn, "-validity", VALIDITY_DAYS, "-keystore", ks(name),
                "-storetype", "JKS", "-storepass", STORE_PASS, "-keypass", STORE_PASS));
        if (ca) args.addAll(Arrays.asList("-ext", "bc:c", "-ext", "ku:c=keyCertSign,cRLSign"));
        keytool(args.toArray(new String[0]));
        keytool("-certreq", "-alias", name, "-keystore", ks(name), "-storepass", STORE_PASS,
                "-file", work.resolve(name + ".csr").toString());
        return null;
    }

    /** CERT.crt: a certificate for key pair NAME signed by "ca", with these extensions. */
    static void sign(String name, String cert, String startDate, String validityDays, String... exts)
            throws Exception {
        List<String> args = new ArrayList<>(Arrays.asList("-gencert", "-alias", "ca", "-keystore", ks("ca"),
                "-storepass", STORE_PASS, "-infile", work.resolve(name + ".csr").toString(),
                "-outfile", work.resolve(cert + ".crt").toString(), "-rfc", "-validity", validityDays));
        if (startDate != null) args.addAll(Arrays.asList("-startdate", startDate));
        for (String e : exts) args.addAll(Arrays.asList("-ext", e));
        keytool(args.toArray(new String[0]));
    }

    // ---- reading what keytool wrote ----

    static KeyStore load(String name) throws Exception {
        KeyStore ks = KeyStore.getInstance("JKS");
        try (InputStream in = Files.newInputStream(Paths.get(ks(name)))) {
            ks.load(in, STORE_PASS.toCharArray());
        }
        return ks;
    }

    static X509Certificate selfSignedCert(String name) throws Exception {
        return (X509Certificate) load(name).getCertificate(name);
    }

    static PrivateKey key(String name) throws Exception {
        return (PrivateKey) load(name).getKey(name, STORE_PASS.toCharArray());
    }

    static X509Certificate signedCert(String name) throws Exception {
        try (InputStream in = Files.newInputStream(work.resolve(name + ".crt"))) {
            return (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
        }
    }

    // ---- writing ----

    static String pemBlock(String type, byte[] der) {
        String b64 = Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der);
        return "-----BEGIN " + type + "-----\n" + b64 + "\n-----END " + type + "-----\n";
    }

    static String pemString(X509Certificate... chain) throws Exception {
        StringBuilder sb = new StringBuilder();
        for (X509Certificate c : chain) sb.append(pemBlock("CERTIFICATE", c.getEncoded()));
        return sb.toString();
    }

    static void pem(String file, X509Certificate... chain) throws Exception {
        write(file, pemString(chain));
    }

    /** Unencrypted PKCS#8 ("BEGIN PRIVATE KEY"). */
    static String keyPem(PrivateKey key) {
        if (!"PKCS#8".equals(key.getFormat())) throw new IllegalStateException("key format " + key.getFormat());
        return pemBlock("PRIVATE KEY", key.getEncoded());
    }

    /**
     * Encrypted PKCS#8 ("BEGIN ENCRYPTED PRIVATE KEY"): PBES2 with PBKDF2-HMAC-SHA256 and
     * AES-256-CBC, what `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes.
     */
    static String encryptedKeyPem(PrivateKey key, String password) throws Exception {
        String alg = "PBEWithHmacSHA256AndAES_256";
        byte[] salt = new byte[16];
        byte[] iv = new byte[16];
        SecureRandom rnd = new SecureRandom();
        rnd.nextBytes(salt);
        rnd.nextBytes(iv);
        SecretKey pbeKey = SecretKeyFactory.getInstance(alg).generateSecret(new PBEKeySpec(password.toCharArray()));
        Cipher cipher = Cipher.getInstance(alg);
        cipher.init(Cipher.ENCRYPT_MODE, pbeKey, new PBEParameterSpec(salt, 10000, new IvParameterSpec(iv)));
        byte[] encrypted = cipher.doFinal(key.getEncoded());
        // The PBES2-params as the JDK encodes them; the EncryptedPrivateKeyInfo around them is
        // assembled by hand because JDK 17's EncryptedPrivateKeyInfo(AlgorithmParameters, ..)
        // does not know the PBES2 algorithm names ("unrecognized algorithm name").
        byte[] pbes2Params = cipher.getParameters().getEncoded();
        byte[] pbes2Oid = {0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x05, 0x0d};
        byte[] der = der(0x30, concat(der(0x30, concat(pbes2Oid, pbes2Params)), der(0x04, encrypted)));
        new EncryptedPrivateKeyInfo(der); // parses it back: fails here rather than in a test
        return pemBlock("ENCRYPTED PRIVATE KEY", der);
    }

    /** A DER TLV with this tag and content. */
    static byte[] der(int tag, byte[] content) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        b.write(tag);
        int n = content.length;
        if (n < 0x80) {
            b.write(n);
        } else {
            int bytes = n > 0xffffff ? 4 : n > 0xffff ? 3 : n > 0xff ? 2 : 1;
            b.write(0x80 | bytes);
            for (int i = bytes - 1; i >= 0; i--) b.write(n >>> (8 * i));
        }
        b.writeBytes(content);
        return b.toByteArray();
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] r = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }

    static void pkcs12(String file, String alias, PrivateKey key, X509Certificate[] chain) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        ks.setKeyEntry(alias, key, STORE_PASS.toCharArray(), (Certificate[]) chain);
        try (OutputStream o = Files.newOutputStream(out.resolve(file))) {
            ks.store(o, STORE_PASS.toCharArray());
        }
        System.out.println(out.resolve(file));
    }

    static void write(String file, String text) throws Exception {
        Files.write(out.resolve(file), text.getBytes(StandardCharsets.US_ASCII));
        System.out.println(out.resolve(file));
    }

    static void deleteTree(Path dir) throws Exception {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : (Iterable<Path>) s.sorted(Comparator.reverseOrder())::iterator) Files.delete(p);
        }
    }
}
